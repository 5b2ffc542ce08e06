/** Secrets the service may quote back, cut out of what it answers before anything keeps or shows it. */

const REDACTED = '[redacted]';

/** A secret as a serializer that escapes HTML-sensitive and non-ASCII characters writes it (each UTF-16 unit as \uXXXX), in upper- and lower-case hex. */
function unicodeEscaped(secret: string): string[] {
  const unit = (code: number) => `\\u${code.toString(16).toUpperCase().padStart(4, '0')}`;
  const upper = Array.from(secret, (ch) => (ch === '\\' ? '\\\\' : /[\u0000-\u001f"&'+<>`\u007f-\uffff]/.test(ch) ? Array.from({ length: ch.length }, (_, i) => unit(ch.charCodeAt(i))).join('') : ch)).join('');
  return [upper, upper.replace(/\\u([0-9A-F]{4})/g, (_, hex: string) => `\\u${hex.toLowerCase()}`)];
}

/**
 * The value with each secret cut out of every string in it. A service may quote what it was sent
 * in its problem details ("API key … is not valid", "password 'x' is too short"), and those reach
 * the CLI's message, the logs and, for a refused verification, the patient's chart.
 */
export function redacted<T>(value: T, secrets: readonly string[]): T {
  // As written and as JSON writes it: a service quoting the body it refused escapes a password's quotes and backslashes
  // (some its slashes too, as \/), and some serializers (.NET's System.Text.Json by default) write quotes, &'+<>` and all but ASCII as \uXXXX.
  // The longest first: a secret that holds another is cut out whole.
  const forms = new Set(secrets.flatMap((secret) => [secret, JSON.stringify(secret).slice(1, -1), JSON.stringify(secret).slice(1, -1).replaceAll('/', '\\/'), ...unicodeEscaped(secret)]));
  const present = [...forms].filter((secret) => secret !== '').sort((a, b) => b.length - a.length);
  if (present.length === 0) return value;
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return present.reduce((text, secret) => text.split(secret).join(REDACTED), v);
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v === 'object' && v !== null) return Object.fromEntries(Object.entries(v).map(([k, item]) => [k, walk(item)]));
    return v;
  };
  return walk(value) as T;
}

