"""The book's language models (chapters 22–24 and every later chapter)."""
