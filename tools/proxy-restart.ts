/**
 * wrangler dev's proxy answers a request whose pooled connection to the Worker was closed under it
 * with `503 Your worker restarted mid-request` (cloudflare/workers-sdk#14641, open upstream): the
 * Worker never saw the request, or its answer was lost. Every Flashgate write is idempotent
 * (a reservation by its purchase token, a cancel by the reservation, a payment by its event id,
 * a waitlist join by the user), so a Node client sends the same request again, unchanged, and
 * counts how often it had to.
 */
const RESTARTED = "Your worker restarted mid-request";
/** Attempts after the first; the proxy drops one request in several hundred, not a run of them. */
const RETRIES = 5;

/** How many requests were sent again after that answer (for a harness's summary). */
export const proxyRestarts = { retried: 0 };

/**
 * Restarts of the Worker this process makes itself (tools/dev-server.ts `restart`): a request whose
 * connection failed while one was under way is sent again, unchanged, once the Worker is back.
 */
export const workerRestarts = {
  /** Requests sent again after a restart cut them off (for a harness's summary). */
  resent: 0,
  current: null as Promise<void> | null,
  during(restart: Promise<void>): void {
    this.current = restart;
    const clear = () => {
      if (this.current === restart) this.current = null;
    };
    restart.then(clear, clear);
  },
};

/** Whether an answer is wrangler dev's proxy dropping the request (not the Worker's own 503 BUSY). */
export function isProxyRestart(status: number, text: string): boolean {
  return status === 503 && text.includes(RESTARTED);
}

/**
 * `fetch`, sending the same request again (same body, so the same token) while wrangler dev's proxy
 * answers that it dropped it. The body must be a string (or absent): it is sent more than once.
 * Returns the final response with its body already read as text.
 */
export async function fetchRetryingRestarts(
  url: string,
  init: RequestInit & { body?: string | null },
): Promise<{ response: Response; text: string }> {
  for (let attempt = 0; ; attempt++) {
    const answer = await answerOf(url, init);
    if (!answer) {
      await workerRestarts.current?.catch(() => undefined);
      workerRestarts.resent++;
      attempt--;
      continue;
    }
    const { response, text } = answer;
    if (!isProxyRestart(response.status, text) || attempt >= RETRIES) return answer;
    proxyRestarts.retried++;
    await new Promise((resolve) => setTimeout(resolve, 50 * (attempt + 1)));
  }
}

/**
 * One request's answer with its body read, or null when a restart of our own lost it: the connection
 * refused or cut, or a 2xx it left with an empty body (the Worker stopped mid-answer; the write may
 * have been made). Any other failure is an error.
 */
async function answerOf(url: string, init: RequestInit): Promise<{ response: Response; text: string } | null> {
  let response: Response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    if (!workerRestarts.current) throw err;
    return null;
  }
  const text = await response.text();
  const lost = workerRestarts.current !== null && text === "" && response.ok && response.status !== 204;
  return lost ? null : { response, text };
}
