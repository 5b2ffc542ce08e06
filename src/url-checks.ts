/** Whether text is an http(s) URL, as a FHIR server's base is given (the command line, the environment, an embedder's config). */
export function isHttpUrl(text: string): boolean {
  return /^https?:\/\/\S+$/.test(text);
}

/** Whether a URL carries a user or password: fetch refuses such URLs and repeats them whole in its error. */
export function carriesCredentials(url: string): boolean {
  if (!URL.canParse(url)) return false;
  const { username, password } = new URL(url);
  return username !== '' || password !== '';
}
