"""Exports for other tools: TensorBoard event files and the Profiler plugin's logdir (tensorboard), and the
trace annotated with a track of labelled idle gaps for Perfetto / the trace viewer (annotate).

May import: everything up to and including render. Never orchestrate or commands.
"""
