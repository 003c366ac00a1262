"""Language (chapters 17–18): text to tokens to vectors, and the first language models.

tokenizer       UTF-8 and byte-level BPE: train, encode, decode (17)
embedding       embedding lookup, its scatter-add gradient, tied output weights (17)
language_model  n-gram and neural (MLP) language models, masked-LM objective (18)
corpora         small text corpora that ship inside the package (17, 23)
"""
