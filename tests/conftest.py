import matplotlib

matplotlib.use("Agg")  # tests draw figures without a display

import torch  # noqa: E402

# The tests run in two processes on two cores (pytest -n 2); a second torch thread in each
# would only oversubscribe them, and the tests' tensors are small.
torch.set_num_threads(1)
