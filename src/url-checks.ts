/** Whether text is an http(s) URL with a host, as a base URL is given (the command line, the environment, an embedder's config). */
export function isHttpUrl(text: string): boolean {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
}

/** Whether a URL carries a user or password: fetch refuses such URLs and repeats them whole in its error. */
export function carriesCredentials(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const { username, password } = new URL(url);
  return username !== '' || password !== '';
}

/** This machine: plain HTTP to it never crosses a network. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost') || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** Whether a URL names this machine (localhost, 127.x, ::1). */
export function onThisMachine(url: string): boolean {
  return URL.canParse(url) && isLoopbackHost(new URL(url).hostname);
}

/**
 * Whether a URL is plain http to a host other than this machine: what goes to it (an API key, the
 * chart's access token, patient data) would cross the network unencrypted. Refused unless the
 * deployment says so (allowInsecureHttp, DENTAL_ELIG_ALLOW_INSECURE_HTTP).
 */
export function isPlainHttpAcrossNetwork(url: string): boolean {
  return URL.canParse(url) && new URL(url).protocol === 'http:' && !onThisMachine(url);
}

/** The http origin of a server listening on `host` (an IPv6 address in brackets, as a URL needs it). */
export function httpOrigin(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** What goes to the chart's FHIR base, and to the SMART token endpoint its tokens come from, as that refusal says it. */
export const CHART_TRAFFIC = "the chart's access token and patient data";
export const TOKEN_TRAFFIC = 'the client assertion and the access token';

/** The one wording of that refusal: `sent` is what would go unencrypted, `allow` how the deployment says it may. */
export function plainHttpRefused(sent: string, allow: string): string {
  return `plain http to a host other than this machine would send ${sent} unencrypted; use https, or allow it explicitly (${allow})`;
}

/**
 * A request's target (req.url) as a URL, or undefined where it is none (//, /\\): new URL throws
 * on such, and thrown in a request listener it ends the process, from anyone who reaches the port.
 */
export function requestUrl(target: string | undefined, base: string): URL | undefined {
  const text = target ?? '/';
  return URL.canParse(text, base) ? new URL(text, base) : undefined;
}
