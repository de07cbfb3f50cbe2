/**
 * Concurrent requests of an isolate share one read of a SKU (a catalog load, a draw, a display), but
 * none waits on another's read past {@link SHARED_READ_MS} after it began: on workerd a promise that
 * a cancelled request started never settles (./jwks.ts says so too), and every request
 * awaiting it would hang for as long as the isolate lives. Past that, a request reads for itself.
 */
export const SHARED_READ_MS = 5_000;

const LATE = Symbol("late");

/** `read` (begun at `startedAt`, maybe by another request), or `own()` once it is {@link SHARED_READ_MS} old. */
export async function sharedRead<T>(read: Promise<T>, startedAt: number, own: () => Promise<T>): Promise<T> {
  const left = startedAt + SHARED_READ_MS - Date.now();
  if (left <= 0) return own();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<typeof LATE>((resolve) => {
    timer = setTimeout(() => resolve(LATE), left);
  });
  try {
    const first = await Promise.race([read, late]);
    return first === LATE ? own() : first;
  } finally {
    clearTimeout(timer);
  }
}
