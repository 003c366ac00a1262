"""Print the notebooks of _toc.yml, in reading order, relative to the repository root."""

from booktools import ROOT, toc_notebooks

if __name__ == "__main__":
    print(" ".join(str(p.relative_to(ROOT)) for p in toc_notebooks()))
