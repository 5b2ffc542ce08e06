/** Resolves when the signal aborts, or on SIGINT / SIGTERM when there is no signal. */
export function stopped(signal: AbortSignal | undefined): Promise<void> {
  if (signal) {
    return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  }
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
