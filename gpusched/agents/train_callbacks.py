"""Callbacks of ``gpusched-train`` (:mod:`gpusched.agents.train`): progress lines, the wall-clock limit and a
graceful stop on Ctrl-C. Imported when training starts (stable-baselines3 is slow to import)."""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


def hms(seconds: float) -> str:
    """``seconds`` as H:MM:SS."""
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress(BaseCallback):
    """Log a progress line (steps done / planned, episodes, mean episode reward, elapsed, time left)
    at the start, every ``every_s`` seconds of wall time and at the end."""

    def __init__(self, total: int, every_s: float, log: logging.Logger,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.total, self.every_s, self.log, self.clock = total, every_s, log, clock
        self.t0 = self.last = 0.0
        self.start_steps = self.episodes = 0
        self.logged_at = -1  # the step count of the last line
        self.rewards: deque[float] = deque(maxlen=100)  # the last 100 episodes' returns (Monitor's, unnormalised)

    def _on_training_start(self) -> None:
        self.t0 = self.last = self.clock()
        self.start_steps = int(self.model.num_timesteps)
        self._log()

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            if "episode" in info:  # an episode ended (Monitor's record of it)
                self.episodes += 1
                self.rewards.append(float(info["episode"]["r"]))
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self._log()
        return True

    def _on_training_end(self) -> None:
        if self.logged_at != int(self.model.num_timesteps):
            self._log()

    def _log(self) -> None:
        self.logged_at = int(self.model.num_timesteps)
        self.log.info(self.line())

    def line(self) -> str:
        done = int(self.model.num_timesteps)
        elapsed = self.clock() - self.t0
        rate = (done - self.start_steps) / elapsed if elapsed > 0 else 0.0
        left = f"~{hms((self.total - done) / rate)}" if rate > 0 and done < self.total else ("0:00:00" if done >= self.total else "?")
        mean = f"{np.mean(self.rewards):.4g} (last {len(self.rewards)})" if self.rewards else "- (no episode finished yet)"
        return (f"steps {done:,}/{self.total:,} ({100.0 * done / self.total:.1f} %) | episodes {self.episodes:,} | "
                f"mean episode reward {mean} | elapsed {hms(elapsed)} | left {left}")


class WallClock(BaseCallback):
    """Stop training after ``limit_s`` seconds of wall time, less ``excluded()`` seconds (time spent in
    checkpoint selection); ``fired`` says whether it stopped the run."""

    def __init__(self, limit_s: float, excluded: Callable[[], float]) -> None:
        super().__init__()
        self.limit_s = limit_s
        self.excluded = excluded
        self.t0 = 0.0
        self.fired = False

    def _on_training_start(self) -> None:
        self.t0 = time.perf_counter()

    def _on_step(self) -> bool:
        if time.perf_counter() - self.t0 - self.excluded() < self.limit_s:
            return True
        self.fired = True
        return False


class StopRequest(BaseCallback):
    """Stop training at the next env step once ``requested()`` is true (Ctrl-C)."""

    def __init__(self, requested: Callable[[], bool]) -> None:
        super().__init__()
        self.requested = requested

    def _on_step(self) -> bool:
        return not self.requested()


class SigintStop:
    """Inside ``with``: the first Ctrl-C (SIGINT) sets ``requested`` (training stops at its next step and
    the model is saved); a second one raises KeyboardInterrupt at once. Outside the main thread: no-op."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> SigintStop:
        try:
            self._old = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread
            self._old = None
        return self

    def _handle(self, _sig: int, _frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.log.warning("Ctrl-C: stopping at the next step and saving the model (Ctrl-C again to stop at once)")

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
