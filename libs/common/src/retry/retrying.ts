/**
 * Calls `fn` until it does not throw, waiting between tries from `firstDelayMs` doubling up to 1 s,
 * for at most `budgetMs`; then the last failure is thrown. For a dependency that may be briefly
 * unreachable (a Redis or Postgres restart).
 */
export async function retrying<T>(fn: () => Promise<T>, budgetMs: number, firstDelayMs = 100): Promise<T> {
  const deadline = Date.now() + budgetMs;
  for (let delay = firstDelayMs; ; delay = Math.min(delay * 2, 1_000)) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() + delay >= deadline) {
        throw err;
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
