"""The shared classifier loop and feature probes against scikit-learn, and the digits split."""

import copy

import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from mlbook import datasets
from mlbook.nn import fit


@pytest.fixture(scope="module")
def data():
    return datasets.digits()


def test_digits_split_is_stratified_disjoint_and_reproducible(data):
    assert data.x_train.shape[1:] == (1, 8, 8) and data.x_train.dtype == torch.float32
    assert len(data.x_train) + len(data.x_test) == 1797
    assert 0.0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1.0
    share = torch.bincount(data.y_test, minlength=10) / torch.bincount(
        data.y_train + 0, minlength=10
    ).add(torch.bincount(data.y_test, minlength=10))
    assert torch.allclose(share.double(), torch.full((10,), 0.25, dtype=torch.float64), atol=0.01)
    again = datasets.digits()
    assert torch.equal(again.x_test, data.x_test) and torch.equal(again.y_train, data.y_train)
    other = datasets.digits(seed=1)
    assert not torch.equal(other.y_train, data.y_train)
    flat = lambda x: {tuple(r.tolist()) for r in x.flatten(1)}  # noqa: E731
    # sklearn's digits hold a few exact duplicate images; the index split itself is disjoint
    assert len(flat(data.x_train) & flat(data.x_test)) < 10
    assert data.n_classes == 10


def test_linear_probe_matches_scikit_learn_logistic_regression(data):
    # 16 features (4 x 4 average-pooled pixels) keep the convex fit quick for both solvers
    pool = lambda x: torch.nn.functional.avg_pool2d(x, 2).flatten(1).double()  # noqa: E731
    ztr, zte = pool(data.x_train), pool(data.x_test)
    ours = fit.linear_probe(ztr, data.y_train, zte, data.y_test, l2=1e-2, steps=100)
    sc = StandardScaler().fit(ztr.numpy())
    n = len(ztr)
    ref = LogisticRegression(C=1.0 / (1e-2 * n), max_iter=1000, tol=1e-8)
    ref.fit(sc.transform(ztr.numpy()), data.y_train.numpy())
    theirs = ref.score(sc.transform(zte.numpy()), data.y_test.numpy())
    assert abs(ours - theirs) <= 2 / len(zte)  # the same convex optimum, up to a test row or two
    with torch.no_grad():  # frozen features are often computed under no_grad
        assert fit.linear_probe(ztr, data.y_train, zte, data.y_test, l2=1e-2, steps=100) == ours


def test_knn_accuracy_matches_scikit_learn(data):
    ztr, zte = data.x_train.flatten(1), data.x_test.flatten(1)
    ours = fit.knn_accuracy(ztr, data.y_train, zte, data.y_test, k=1)
    ref = KNeighborsClassifier(n_neighbors=1, metric="cosine").fit(ztr.numpy(), data.y_train)
    assert ours == pytest.approx(ref.score(zte.numpy(), data.y_test.numpy()), abs=1e-12)


def test_fit_classifier_learns_digits_and_is_seeded(data):
    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
        losses = fit.fit_classifier(model, data.x_train, data.y_train, steps=100, lr=0.05)
        return model, losses

    model, losses = run()
    assert losses[-1] < losses[0] / 4
    assert fit.accuracy(model, data.x_test, data.y_test) > 0.9
    assert run()[1] == losses


def test_fit_classifier_steps_are_torch_adamw(data):
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).double()
    theirs = copy.deepcopy(ours)
    x, y = data.x_train.double(), data.y_train
    fit.fit_classifier(ours, x, y, steps=20, lr=0.05, weight_decay=0.1, batch_size=64, seed=3)
    opt = torch.optim.AdamW(theirs.parameters(), lr=0.05, weight_decay=0.1)
    g = torch.Generator().manual_seed(3)
    for _ in range(20):  # the same minibatches, drawn from the same seeded generator
        idx = torch.randint(len(x), (64,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(theirs(x[idx]), y[idx]).backward()
        opt.step()
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


def test_bad_arguments_are_named(data):
    model = torch.nn.Linear(64, 10)
    with pytest.raises(ValueError, match="y must have shape"):
        fit.fit_classifier(model, data.x_train.flatten(1), data.y_train[:-1], steps=1)
    with pytest.raises(ValueError, match="x must not be empty"):
        fit.fit_classifier(model, torch.zeros(0, 64), torch.zeros(0, dtype=torch.long), steps=1)
    with pytest.raises(ValueError, match="z_test must have 64 columns"):
        fit.linear_probe(torch.ones(4, 64), torch.arange(4), torch.ones(2, 3), torch.arange(2))
    with pytest.raises(ValueError, match="k must be"):
        fit.knn_accuracy(torch.ones(4, 3), torch.arange(4), torch.ones(2, 3), torch.arange(2), k=5)
    with pytest.raises(ValueError, match="test_fraction"):
        datasets.digits(test_fraction=1.0)


def test_stored_results_load_and_a_wrong_name_is_named():
    runs = datasets.stored("vit_digits")
    assert isinstance(runs, dict) and runs
    with pytest.raises(ValueError, match="name must be one of"):
        datasets.stored("no_such_run")
