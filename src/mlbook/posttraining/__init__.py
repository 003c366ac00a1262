"""Post-training (chapters 33–38): the book's decoder fine-tuned, rewarded, aligned and distilled.

task          the one-digit addition task: tokens, loss masks, samples, exact-match reward (33–44)
sft           the masked fine-tuning loss, its logit gradient, the fine-tuning loop (33)
lora          low-rank adapters on the decoder's projections, merge and unmerge (33)
rl            returns, Bellman evaluation, REINFORCE and baselines, importance weights, GAE (34)
rlhf          Bradley–Terry reward models, the KL-regularised objective, PPO's clipped loss (35)
dpo           the KL-regularised optimum, implicit rewards, the DPO loss and its gradient (36)
grpo          group-normalised and leave-one-out advantages, the k3 KL estimator, GRPO (37)
distillation  temperature-softened targets, the T² distillation loss and its gradient (38)
reasoning     best-of-n, majority vote, chains of thought as a latent variable (38)
"""
