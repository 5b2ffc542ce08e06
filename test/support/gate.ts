/** A promise someone else resolves: a step awaits `opened`, held until the test calls `open()`. */
export function gate(): { open: () => void; opened: Promise<void> } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}
