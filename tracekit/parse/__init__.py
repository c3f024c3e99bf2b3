"""Stage 2, parse: Chrome-trace JSON (one file per rank) → one typed, versioned Parquet capture.

parser (`parse_to_file`, `load_capture`, finding trace files and ranks, the decode worker pool), decode
(reading files, locating traceEvents, the msgspec decoder, the column rules both decoders share), fast
(the wrapper of the optional C scanner `_fastscan.c`), derive (the derived rows: steps, device busy
intervals, host dispatch gaps — definitions the analysis reuses).

May import: tracekit.errors, tracekit.data. Never a later stage.
"""
