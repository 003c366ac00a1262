"""Inference, systems and agents (chapters 39–44): decoding, serving, scale, tools, retrieval.

decoding      beam search with length normalisation, speculative sampling and its speedup (39)
quantization  absmax scales per tensor, channel and group; SmoothQuant; GPTQ's step; roofline (40)
distributed   ring all-reduce, ZeRO sharding, tensor and pipeline parallelism, all-to-all (41)
agents        histories, a validated tool dispatcher, budgets and the agent loop's stops (42)
retrieval     cosine and TF-IDF retrieval, RAG prompts, the unbiased pass@k, cost per query (43)
capstone      the budget of a model from its shape: parameters, compute, memory (44)
"""
