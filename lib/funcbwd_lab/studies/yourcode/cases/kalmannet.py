"""KalmanNet (KalmanNet/KalmanNet_TSP, Filters/Linear_KF.py at b75e2a2): the batched linear Kalman
filter object; ``GenerateBatch`` allocates ``self.x`` and ``self.sigma`` with ``torch.zeros`` and
writes each time step's posterior into them (``self.x[:, :, t] = ...``) while the filter's moments
live in attributes that every step reads back and rewrites.

Re-created from the upstream class and trimmed (the device plumbing is kept as ``.to(self.device)``
on the CPU; the SystemModel is a small namespace); the in-place lines are upstream's as written.
"""

from __future__ import annotations

import types

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn


# KalmanNet/KalmanNet_TSP Filters/Linear_KF.py, class KalmanFilter (b75e2a2)
class KalmanFilter:

    def __init__(self, SystemModel, args):
        # Device
        if args.use_cuda:
            self.device = torch.device('cuda')
        else:
            self.device = torch.device('cpu')
        self.F = SystemModel.F
        self.m = SystemModel.m
        self.Q = SystemModel.Q.to(self.device)

        self.H = SystemModel.H
        self.n = SystemModel.n
        self.R = SystemModel.R.to(self.device)

        self.T = SystemModel.T
        self.T_test = SystemModel.T_test

    # Predict

    def Predict(self):
        # Predict the 1-st moment of x
        self.m1x_prior = torch.bmm(self.batched_F, self.m1x_posterior).to(self.device)

        # Predict the 2-nd moment of x
        self.m2x_prior = torch.bmm(self.batched_F, self.m2x_posterior)
        self.m2x_prior = torch.bmm(self.m2x_prior, self.batched_F_T) + self.Q

        # Predict the 1-st moment of y
        self.m1y = torch.bmm(self.batched_H, self.m1x_prior)

        # Predict the 2-nd moment of y
        self.m2y = torch.bmm(self.batched_H, self.m2x_prior)
        self.m2y = torch.bmm(self.m2y, self.batched_H_T) + self.R

    # Compute the Kalman Gain
    def KGain(self):
        self.KG = torch.bmm(self.m2x_prior, self.batched_H_T)

        self.KG = torch.bmm(self.KG, torch.inverse(self.m2y))

    # Innovation
    def Innovation(self, y):
        self.dy = y - self.m1y

    # Compute Posterior
    def Correct(self):
        # Compute the 1-st posterior moment
        self.m1x_posterior = self.m1x_prior + torch.bmm(self.KG, self.dy)

        # Compute the 2-nd posterior moment
        self.m2x_posterior = torch.bmm(self.m2y, torch.transpose(self.KG, 1, 2))
        self.m2x_posterior = self.m2x_prior - torch.bmm(self.KG, self.m2x_posterior)

    def Update(self, y):
        self.Predict()
        self.KGain()
        self.Innovation(y)
        self.Correct()

        return self.m1x_posterior,self.m2x_posterior

    def Init_batched_sequence(self, m1x_0_batch, m2x_0_batch):

            self.m1x_0_batch = m1x_0_batch # [batch_size, m, 1]
            self.m2x_0_batch = m2x_0_batch # [batch_size, m, m]

    ######################
    ### Generate Batch ###
    ######################
    def GenerateBatch(self, y):
        """
        input y: batch of observations [batch_size, n, T]
        """
        y = y.to(self.device)
        self.batch_size = y.shape[0] # batch size
        T = y.shape[2] # sequence length (maximum length if randomLength=True)

        # Batched F and H
        self.batched_F = self.F.view(1,self.m,self.m).expand(self.batch_size,-1,-1).to(self.device)
        self.batched_F_T = torch.transpose(self.batched_F, 1, 2).to(self.device)
        self.batched_H = self.H.view(1,self.n,self.m).expand(self.batch_size,-1,-1).to(self.device)
        self.batched_H_T = torch.transpose(self.batched_H, 1, 2).to(self.device)

        # Allocate Array for 1st and 2nd order moments (use zero padding)
        self.x = torch.zeros(self.batch_size, self.m, T).to(self.device)
        self.sigma = torch.zeros(self.batch_size, self.m, self.m, T).to(self.device)

        # Set 1st and 2nd order moments for t=0
        self.m1x_posterior = self.m1x_0_batch.to(self.device)
        self.m2x_posterior = self.m2x_0_batch.to(self.device)

        # Generate in a batched manner
        for t in range(0, T):
            yt = torch.unsqueeze(y[:, :, t],2)
            xt,sigmat = self.Update(yt)
            self.x[:, :, t] = torch.squeeze(xt,2)
            self.sigma[:, :, :, t] = sigmat


_M = _N = 2
_T = 5


def _system_model():
    """A constant-velocity model (KalmanNet's Linear_sysmdl.SystemModel fields)."""
    return types.SimpleNamespace(
        F=torch.tensor([[1.0, 1.0], [0.0, 1.0]]), H=torch.eye(_N, _M), m=_M, n=_N,
        Q=0.1 * torch.eye(_M), R=0.5 * torch.eye(_N), T=_T, T_test=_T)


def _build(decorate):
    # KalmanNet's Filters/KF_test.py makes the filter, Init_batched_sequence, GenerateBatch, then
    # reads KF.x: that sequence, on a fresh filter, is the decorated function
    kf = KalmanFilter(_system_model(), types.SimpleNamespace(use_cuda=False))

    @decorate
    def filter_sequence(y, m1x_0):
        kf.Init_batched_sequence(m1x_0, torch.eye(_M).expand(y.shape[0], _M, _M))
        kf.GenerateBatch(y)
        return kf.x

    return filter_sequence


def filter_sequence_rewrite(y, m1x_0):
    sm = _system_model()
    b = y.shape[0]
    F, H = sm.F.expand(b, _M, _M), sm.H.expand(b, _N, _M)
    x, P = m1x_0, torch.eye(_M).expand(b, _M, _M)
    xs = []
    for t in range(y.shape[2]):
        x_prior = F @ x
        P_prior = F @ P @ F.transpose(1, 2) + sm.Q
        S = H @ P_prior @ H.transpose(1, 2) + sm.R
        K = P_prior @ H.transpose(1, 2) @ torch.inverse(S)
        x = x_prior + K @ (y[:, :, t:t + 1] - H @ x_prior)
        P = P_prior - K @ (S @ K.transpose(1, 2))
        xs.append(x[..., 0])
    return torch.stack(xs, dim=-1)


CASES = [
    Case("KalmanNet:KalmanFilter.GenerateBatch", "KalmanNet",
         "KalmanNet/KalmanNet_TSP Filters/Linear_KF.py: KalmanFilter.GenerateBatch, Update, "
         "Predict, KGain, Innovation, Correct (b75e2a2)",
         "a filter object: self.x = torch.zeros(...) then self.x[:, :, t] = posterior per step, "
         "the moments kept in attributes read back and rewritten every step",
         ("state", "factory", "readback"), _build, filter_sequence_rewrite,
         lambda g: (randn(g, 2, _N, _T), randn(g, 2, _M, 1)), batched=(0, 1), diff=0),
]
