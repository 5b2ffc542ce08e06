/**
 * Runs with these variables set and a module registry of its own, so the modules it requires read
 * them once, as a process started with them would; then puts the environment back.
 */
export function freshModules(env: Record<string, string>, run: () => void): void {
  const saved = { ...process.env };
  try {
    Object.assign(process.env, env);
    jest.isolateModules(run);
  } finally {
    process.env = saved;
  }
}
