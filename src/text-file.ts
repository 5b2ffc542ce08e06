/**
 * A text file's bytes as UTF-8 text, as the CLI and the config file read JSON: the byte-order
 * mark a Windows editor writes first is dropped (JSON.parse refuses it as a character where a value
 * was expected), and UTF-16, which Windows PowerShell 5's `>` writes, is refused by name rather
 * than read as a character every other byte. Undefined for UTF-16; the caller names the file.
 */
export function utf8Text(bytes: Buffer): string | undefined {
  if (isUtf16(bytes)) return undefined;
  const text = bytes.toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** What a file utf8Text refuses is told. */
export const UTF16_REFUSED = 'UTF-16 text (Windows PowerShell 5 writes it with >): save it as UTF-8';

function isUtf16(bytes: Buffer): boolean {
  return bytes.length >= 2 && ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff));
}
