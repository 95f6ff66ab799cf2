"""The CPU's stand-in for gpu/device_assert.py: the script's CUDA error poisons the context, and from
then on every CUDA call raises, the probe's own included (its memory figures, the device's fields).

torch.cuda is faked: a device is initialised and answers until the error; the loss says it lives on
"cuda" (the probe reads the training device from it) while the training runs on the CPU. At the 4th
step the script's sync reports a kernel's device-side assert, as CUDA reports it at the next call
that waits. --dies: the first call after it kills the process instead, as a C++ error thrown in a
CUDA destructor aborts it."""
import os
import signal
import sys
import types

import torch

ERROR = "CUDA error: device-side assert triggered"
DIES = "--dies" in sys.argv
poisoned = False


def device_call(answer):
    def call(*args, **kwargs):
        if poisoned and DIES:
            os.kill(os.getpid(), signal.SIGKILL)
        if poisoned:
            raise RuntimeError(ERROR)
        return answer
    return call


def synchronize(*args, **kwargs):
    global poisoned
    poisoned = True
    raise RuntimeError(ERROR)


torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = device_call(0)
torch.cuda.get_device_properties = device_call(types.SimpleNamespace(name="Fake H100", major=9, minor=0,
                                                                     total_memory=80 << 30))
torch.cuda.is_bf16_supported = device_call(True)
torch.cuda.mem_get_info = device_call((70 << 30, 80 << 30))
torch.cuda.max_memory_allocated = device_call(1 << 20)
torch.cuda.max_memory_reserved = device_call(2 << 20)
torch.cuda.reset_peak_memory_stats = device_call(None)
torch.cuda.synchronize = synchronize


class OnTheDevice(torch.Tensor):
    """A CPU tensor that says it is on the GPU."""

    @property
    def device(self):
        return torch.device("cuda")


model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(4, 8)).pow(2).mean().as_subclass(OnTheDevice)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 3:
        torch.cuda.synchronize()
