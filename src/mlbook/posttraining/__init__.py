"""Post-training (chapters 33-38): the book's decoder fine-tuned, rewarded and aligned.

task    the one-digit addition task, its tokens, masks, samples and exact-match reward (33-44)
"""
