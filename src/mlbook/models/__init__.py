"""The book's language models (chapters 22–24 and every later chapter).

    transformer   pre-norm decoder block, a small LM, parameter and FLOP counts (22)
    gpt           a GPT-2-style LM, its training loop, sampling (23)
"""
