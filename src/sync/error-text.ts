/**
 * A text with what it quotes ('DD1234567', "Zygmuntowicz") left out: the service's and the chart's
 * words may quote the value they refuse, patient data as often as not, where the text reaches a
 * log line or `jobs`.
 */
export function withoutQuotes(text: string): string {
  // A quote opens and closes outside a word: an apostrophe (the patient's, isn't) quotes nothing,
  // and one inside a word it quotes is of that word, as a name's ('O'Brien') is.
  return text.replace(/(?<![\p{L}\p{N}])(?:'(?:[^'\\]|\\.|(?<=[\p{L}\p{N}])'(?=[\p{L}\p{N}]))*'|"(?:[^"\\]|\\.)*")(?![\p{L}\p{N}])/gu, "'…'");
}

/** An error's first line, without anything it may quote from a body. */
export function errorText(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]?.slice(0, 300) ?? 'error';
}
