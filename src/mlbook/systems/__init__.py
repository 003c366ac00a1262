"""Inference, systems and agents (chapters 39-44): decoding, serving, scale, tools, retrieval."""
