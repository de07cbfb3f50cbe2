/**
 * Polls `check` until it stops throwing, for at most `timeoutMs`: waiting on queues and alarms
 * by their observable effect, never by a sleep of fixed length.
 */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 15_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  }
}

/**
 * Awaits `work`, failing with `what` when it has not settled within `timeoutMs`: for a wait with no
 * bound of its own, which would otherwise hang its test until vitest's timeout, with no step named.
 */
export async function settles<T>(work: Promise<T>, what: string, timeoutMs = 20_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
