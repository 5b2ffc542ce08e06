/** A part of something being closed, named for whoever says which one failed. */
export interface Closing {
  name: string;
  close(): Promise<void> | void;
}

/**
 * Closes each part in turn, whatever an earlier one throws: one that fails must not leave the
 * rest open (a lock another process waits for, a file, a socket). Gives back those that failed.
 */
export async function closeEach(parts: readonly Closing[]): Promise<Array<{ name: string; error: unknown }>> {
  const failed: Array<{ name: string; error: unknown }> = [];
  for (const part of parts) {
    try {
      await part.close();
    } catch (error) {
      failed.push({ name: part.name, error });
    }
  }
  return failed;
}

/** closeEach for a caller that takes one error: every part closed all the same, then the first failure thrown. */
export async function closeEachOrThrow(parts: readonly Closing[]): Promise<void> {
  const [first] = await closeEach(parts);
  if (first) throw first.error;
}
