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
