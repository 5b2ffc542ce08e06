import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { loadSettings } from '../../src/cli/config';
import { envFlag } from '../../src/service/config-file';
import { loadServeConfig } from '../../src/service/serve-config';

/** One settings file for every command; secrets only from the environment or a file they name. */
describe('the settings file and the environment', () => {
  let dir: string;
  const file = (content: unknown) => {
    const f = path.join(dir, 'dental-elig.config.json');
    writeFileSync(f, typeof content === 'string' || Buffer.isBuffer(content) ? content : JSON.stringify(content));
    return f;
  };
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'elig-config-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is read by the setup commands and by serve alike, the API key from the key file it names', () => {
    writeFileSync(path.join(dir, 'key'), 'sk_live_from_file\n');
    const config = file({
      baseUrl: 'https://api.example.test',
      apiKeyFile: path.join(dir, 'key'),
      customerId: 'cus_1',
      fhirUrl: 'https://ehr.example.test/fhir/',
      store: 'jobs.sqlite',
      settings: { concurrency: 16 },
    });
    const env = { DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    expect(loadSettings(env, config).client).toMatchObject({ baseUrl: 'https://api.example.test', apiKey: 'sk_live_from_file' });
    const serve = loadServeConfig(env, { configFile: config });
    expect(serve).toMatchObject({
      service: { baseUrl: 'https://api.example.test', apiKey: 'sk_live_from_file' },
      customerId: 'cus_1',
      fhir: { baseUrl: 'https://ehr.example.test/fhir' },
      store: 'jobs.sqlite',
      settings: { concurrency: 16 },
      webhook: { scheme: 'standard-webhooks', secret: 'whsec_c2VjcmV0' },
    });
  });

  it('refuses an empty service URL rather than letting it stand over the file\'s and run the in-process sandbox', () => {
    const secrets = { DENTAL_ELIG_API_KEY: 'k', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    const config = file({ baseUrl: 'https://api.example.test' });
    const empty = "must not be empty (leave it out for serve's in-process sandbox)";
    expect(() => loadServeConfig({ ...secrets, DENTAL_ELIG_BASE_URL: '' }, { configFile: config })).toThrow(`DENTAL_ELIG_BASE_URL: ${empty}`);
    expect(() => loadSettings({ ...secrets, DENTAL_ELIG_BASE_URL: '' }, config)).toThrow(`DENTAL_ELIG_BASE_URL: ${empty}`);
    expect(() => loadServeConfig(secrets, { configFile: file({ baseUrl: '' }) })).toThrow(`baseUrl (config file): ${empty}`);
  });

  it('refuses an empty config file name rather than reading no file at all, the one in the working folder neither', () => {
    const empty = 'must not be empty (leave it out for ./dental-elig.config.json)';
    expect(() => loadServeConfig({ DENTAL_ELIG_CONFIG: '' }, {})).toThrow(`DENTAL_ELIG_CONFIG: ${empty}`);
    expect(() => loadServeConfig({}, { configFile: '' })).toThrow(`--config: ${empty}`);
    expect(() => loadSettings({ DENTAL_ELIG_CONFIG: '' })).toThrow(`DENTAL_ELIG_CONFIG: ${empty}`);
  });

  it('refuses secrets in the file, naming the setting and not the value', () => {
    const config = file({ webhookSecret: 'whsec_dont' });
    expect(() => loadServeConfig({}, { configFile: config })).toThrow(/webhookSecret: secrets do not belong in the config file; set DENTAL_ELIG_WEBHOOK_SECRET/);
    expect(() => loadServeConfig({}, { configFile: config })).not.toThrow(/whsec_dont/);
  });

  it('names the file and the key of a client setting out of range, as for every other setting', () => {
    const config = file({ maxRetries: 50 });
    expect(() => loadServeConfig({}, { configFile: config })).toThrow(`${config}: maxRetries: Too big: expected number to be <=10`);
  });

  it('names a bad URL where it was given: the variable when the environment set it, else the config file\'s key', () => {
    const secrets = { DENTAL_ELIG_API_KEY: 'k', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    const config = file({ baseUrl: 'verify.example.test', fhirUrl: 'fhir.example.test/R4' });
    // The file's baseUrl was named as the variable by serve; setup and verify named the variable's value as the file's key.
    expect(() => loadServeConfig(secrets, { configFile: config })).toThrow(/^baseUrl \(config file\): must be an http\(s\) URL$/);
    expect(() => loadSettings(secrets, config)).toThrow(/^baseUrl \(config file\): must be an http\(s\) URL$/);
    const fromEnv = { ...secrets, DENTAL_ELIG_BASE_URL: 'verify.example.test' };
    expect(() => loadServeConfig(fromEnv, {})).toThrow(/^DENTAL_ELIG_BASE_URL: must be an http\(s\) URL$/);
    expect(() => loadSettings(fromEnv)).toThrow(/^DENTAL_ELIG_BASE_URL: must be an http\(s\) URL$/);
    // The environment's value wins over the file's, and is the one named.
    expect(() => loadSettings({ ...fromEnv, DENTAL_ELIG_API_KEY_HEADER: 'x api key' }, file({ apiKeyHeader: 'x-api-key', baseUrl: 'https://verify.example.test' }))).toThrow(/^DENTAL_ELIG_BASE_URL: /);
    expect(() => loadSettings({ ...secrets, DENTAL_ELIG_BASE_URL: 'https://verify.example.test' }, file({ apiKeyHeader: 'x api key' }))).toThrow(/^apiKeyHeader \(config file\): must be an HTTP header name/);
    const chart = file({ fhirUrl: 'fhir.example.test/R4' });
    expect(() => loadServeConfig({ ...secrets, DENTAL_ELIG_BASE_URL: 'https://verify.example.test' }, { configFile: chart })).toThrow(/^fhirUrl \(config file\): must be an http\(s\) URL$/);
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'fhir.example.test' }, { configFile: chart })).toThrow(/^DENTAL_ELIG_FHIR_URL: must be an http\(s\) URL$/);
  });

  it('refuses credentials in a service or FHIR URL, naming the variable and not the password', () => {
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'https://ehr:s3cret@fhir.example.test/R4' }, {})).toThrow(/^DENTAL_ELIG_FHIR_URL: credentials do not belong in the URL; set DENTAL_ELIG_FHIR_TOKEN/);
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'https://ehr:s3cret@fhir.example.test/R4' }, {})).not.toThrow(/s3cret/);
  });

  it('refuses a plain http FHIR URL to another machine unless allowed, as it refuses the service\'s; the embedded chart and this machine need nothing', () => {
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'http://fhir.example.test/R4' }, {})).toThrow(
      /^DENTAL_ELIG_FHIR_URL: plain http to a host other than this machine would send the chart's access token and patient data unencrypted; use https, or allow it explicitly \(DENTAL_ELIG_ALLOW_INSECURE_HTTP=1\)$/,
    );
    const service = { DENTAL_ELIG_BASE_URL: 'http://service.example.test', DENTAL_ELIG_API_KEY: 'sk_test', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    expect(loadServeConfig({ ...service, DENTAL_ELIG_FHIR_URL: 'http://fhir.example.test/R4', DENTAL_ELIG_ALLOW_INSECURE_HTTP: '1' }, {}).fhir).toEqual({
      baseUrl: 'http://fhir.example.test/R4',
      allowInsecureHttp: true,
    });
    expect(loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'http://127.0.0.1:8080/fhir/' }, {}).fhir).toEqual({ baseUrl: 'http://127.0.0.1:8080/fhir' });
    // The SMART token endpoint the settings file names: the access token it answers opens the chart.
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'https://fhir.example.test/R4' }, { configFile: file('{"fhirTokenEndpoint": "http://auth.example.test/token"}') })).toThrow(
      /^fhirTokenEndpoint \(config file\): plain http to a host other than this machine would send the client assertion and the access token unencrypted; use https, or allow it explicitly \(DENTAL_ELIG_ALLOW_INSECURE_HTTP=1\)$/,
    );
  });

  it('refuses to run the in-process sandbox against a chart on another machine: its made-up eligibility would be written there', () => {
    expect(() => loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'https://ehr.example.test/fhir', DENTAL_ELIG_FHIR_TOKEN: 'tok' }, {})).toThrow(
      /^DENTAL_ELIG_BASE_URL: not set, so the in-process sandbox would write made-up eligibility into the chart DENTAL_ELIG_FHIR_URL names; /,
    );
    // A chart on this machine, or none (the embedded one): the sandbox is what a trial run wants.
    expect(loadServeConfig({ DENTAL_ELIG_FHIR_URL: 'http://localhost:8080/fhir' }, {}).fhir?.baseUrl).toBe('http://localhost:8080/fhir');
    expect(loadServeConfig({}, {}).fhir).toBeUndefined();
  });

  it('takes the webhook secret being replaced beside its successor while it is rotated, and refuses it alone or malformed', () => {
    const secret = `whsec_${Buffer.from('a-test-secret-of-enough-length!!').toString('base64')}`;
    const previous = `whsec_${Buffer.from('the-secret-before-this-one-here!').toString('base64')}`;
    expect(loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: secret, DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: previous }, {}).webhook).toEqual({ scheme: 'standard-webhooks', secret, previousSecret: previous });
    expect(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: previous }, {})).toThrow(
      /^DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: only beside DENTAL_ELIG_WEBHOOK_SECRET, the secret that replaces it$/,
    );
    expect(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: secret, DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: 'whsec_cut-off' }, {})).toThrow(/^DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: must be a Standard Webhooks secret/);
  });

  it('says where a broken file is broken, without its content', () => {
    const config = file('{"baseUrl": https://x}');
    expect(() => loadServeConfig({}, { configFile: config })).toThrow(`${config}: not valid JSON at line 1, column 13: unexpected character where a value was expected`);
  });

  it('reads a config file a Windows editor saved with a byte-order mark, and names UTF-16 rather than misreading it', () => {
    expect(loadServeConfig({}, { configFile: file('\uFEFF{"httpPort": 8099}') }).httpPort).toBe(8099);
    const config = file(Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('{"httpPort": 8099}', 'utf16le')]));
    expect(() => loadServeConfig({}, { configFile: config })).toThrow(`${config}: UTF-16 text (Windows PowerShell 5 writes it with >): save it as UTF-8`);
  });

  it('needs the API key and the webhook secret once a real service is named', () => {
    expect(() => loadServeConfig({ DENTAL_ELIG_BASE_URL: 'https://api.example.test' }, {})).toThrow(/^DENTAL_ELIG_API_KEY: not set/);
    expect(() => loadServeConfig({ DENTAL_ELIG_BASE_URL: 'https://api.example.test', DENTAL_ELIG_API_KEY: 'k' }, {})).toThrow(/^DENTAL_ELIG_WEBHOOK_SECRET: not set/);
    expect(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: 'plain' }, {})).toThrow(/^DENTAL_ELIG_WEBHOOK_SECRET: must be a Standard Webhooks secret/);
    // Base64 characters that do not decode (a cut-off paste) are refused here, naming the variable, not at start by the library.
    expect(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_abc' }, {})).toThrow(/^DENTAL_ELIG_WEBHOOK_SECRET: must be a Standard Webhooks secret/);
    expect(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_a=b=' }, {})).toThrow(/^DENTAL_ELIG_WEBHOOK_SECRET: must be a Standard Webhooks secret/);
  });

  it('names DENTAL_ELIG_LOG_LEVEL when it is not a level, as the config file names logLevel', () => {
    expect(() => loadServeConfig({ DENTAL_ELIG_LOG_LEVEL: 'verbose' }, {})).toThrow(/^DENTAL_ELIG_LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent$/);
    expect(loadServeConfig({ DENTAL_ELIG_LOG_LEVEL: 'debug' }, {}).logLevel).toBe('debug');
  });

  it('reads DENTAL_ELIG_ALLOW_INSECURE_HTTP as yes or no in any common spelling, over the file, and refuses anything else', () => {
    const insecure = { DENTAL_ELIG_BASE_URL: 'http://verify.example.test', DENTAL_ELIG_API_KEY: 'k', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    for (const yes of ['1', 'true', 'TRUE', 'Yes', ' yes ']) {
      expect(loadServeConfig({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: yes }, {}).service).toMatchObject({ allowInsecureHttp: true });
    }
    for (const no of ['0', 'false', 'No']) {
      expect(() => loadServeConfig({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: no }, {})).toThrow(/^DENTAL_ELIG_BASE_URL: plain http to a host other than this machine/);
    }
    // The environment's no overrides the file's yes; unset or empty leaves the file's word.
    const config = file({ allowInsecureHttp: true });
    expect(() => loadServeConfig({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: 'false' }, { configFile: config })).toThrow(/^DENTAL_ELIG_BASE_URL: plain http/);
    expect(loadServeConfig({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: '' }, { configFile: config }).service).toMatchObject({ allowInsecureHttp: true });
    expect(loadSettings({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: 'true' }).client.allowInsecureHttp).toBe(true);
    for (const bad of ['ture', 'on', '2']) {
      expect(() => loadServeConfig({ ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: bad }, {})).toThrow(/^DENTAL_ELIG_ALLOW_INSECURE_HTTP: must be 1, true or yes, or 0, false or no$/);
    }
    expect(envFlag({}, 'DENTAL_ELIG_ALLOW_INSECURE_HTTP')).toBeUndefined();
  });

  it('names the variable an unusable API key file or an empty data dir was set in, as a configuration error', () => {
    const refusal = (env: NodeJS.ProcessEnv, overrides: { configFile?: string; dataDir?: string } = {}) => {
      try {
        loadServeConfig(env, overrides);
      } catch (err) {
        return `${(err as Error).constructor.name}: ${(err as Error).message}`;
      }
    };
    const missing = path.join(dir, 'no-key');
    const service = { DENTAL_ELIG_BASE_URL: 'https://api.example.test', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
    expect(refusal({ ...service, DENTAL_ELIG_API_KEY_FILE: missing })).toBe(`ConfigError: DENTAL_ELIG_API_KEY_FILE: ${missing} cannot be read`);
    expect(refusal(service, { configFile: file({ apiKeyFile: missing }) })).toBe(`ConfigError: apiKeyFile: ${missing} cannot be read`);
    // An empty key file (a secret mounted before it was written) is named, not read as no key set.
    const empty = path.join(dir, 'empty-key');
    writeFileSync(empty, '\n');
    expect(refusal({ ...service, DENTAL_ELIG_API_KEY_FILE: empty })).toBe(`ConfigError: DENTAL_ELIG_API_KEY_FILE: ${empty} is empty`);
    // An empty token would take notifications from anyone, where the operator meant to require one.
    for (const token of ['', ' ']) {
      expect(refusal({ DENTAL_ELIG_NOTIFICATION_TOKEN: token })).toBe('ConfigError: DENTAL_ELIG_NOTIFICATION_TOKEN: must not be empty (leave it out to take notifications without a token)');
    }
    expect(refusal({ DENTAL_ELIG_DATA_DIR: '' })).toBe(`ConfigError: DENTAL_ELIG_DATA_DIR: must not be empty (leave it out for ${path.join('.dental-elig', 'data')})`);
    expect(refusal({}, { dataDir: '' })).toBe(`ConfigError: --data-dir: must not be empty (leave it out for ${path.join('.dental-elig', 'data')})`);
    // Spaces were a folder of that name in the working one: a store of its own, as an empty one was.
    expect(refusal({ DENTAL_ELIG_DATA_DIR: ' ' })).toBe(`ConfigError: DENTAL_ELIG_DATA_DIR: must not be empty (leave it out for ${path.join('.dental-elig', 'data')})`);
    expect(refusal({}, { configFile: file({ dataDir: '  ' }) })).toBe(`ConfigError: dataDir (config file): must not be empty (leave it out for ${path.join('.dental-elig', 'data')})`);
    // A file where the folder would be: said so, not as mkdir's EEXIST or ENOTDIR once serve is starting.
    const aFile = path.join(dir, 'a-file');
    writeFileSync(aFile, 'not a folder');
    expect(refusal({}, { dataDir: aFile })).toBe(`ConfigError: --data-dir: ${aFile} is a file, not a folder`);
    expect(refusal({ DENTAL_ELIG_DATA_DIR: path.join(aFile, 'data') })).toBe(`ConfigError: DENTAL_ELIG_DATA_DIR: ${aFile} is a file, so no folder can be made under it`);
    expect(refusal({}, { configFile: file({ dataDir: aFile }) })).toBe(`ConfigError: dataDir (config file): ${aFile} is a file, not a folder`);
    expect(loadServeConfig({}, { dataDir: path.join(dir, 'not-yet', 'data') }).dataDir).toBe(path.join(dir, 'not-yet', 'data'));
  });

  it('runs on embedded defaults with nothing set', () => {
    const serve = loadServeConfig({}, {});
    expect(serve.service).toBeUndefined();
    expect(serve.fhir).toBeUndefined();
    expect(serve).toMatchObject({ dataDir: path.join('.dental-elig', 'data'), mllpPort: 2575, httpPort: 8090, host: '127.0.0.1' });
  });

  it('reads inline portal credentials from the file the environment names, and says what is wrong without the secret', () => {
    const creds = path.join(dir, 'portals.json');
    writeFileSync(creds, JSON.stringify({ deltadentalins: { username: 'front-desk', password: 'portal-secret' } }));
    expect(loadServeConfig({ DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: creds }, {}).inlineCredentials).toEqual({ deltadentalins: { username: 'front-desk', password: 'portal-secret' } });
    writeFileSync(creds, JSON.stringify({ deltadentalins: { username: 'front-desk', password: '' } }));
    expect(() => loadServeConfig({ DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: creds }, {})).toThrow(/^DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: deltadentalins\.password/);
  });

  it('refuses a database password on the command line, and takes one from the environment', () => {
    expect(() => loadServeConfig({}, { store: 'postgres://elig:pw@db/x' })).toThrow(/^--store: a password does not belong on the command line/);
    expect(loadServeConfig({ DENTAL_ELIG_STORE: 'postgres://elig:pw@db/x' }, {}).store).toBe('postgres://elig:pw@db/x');
  });

  it('refuses a store location no store opens as a setting, naming where it came from and not repeating it', () => {
    const file = path.join(dir, 'dental-elig.config.json');
    writeFileSync(file, JSON.stringify({ store: 'mysql://elig@db/x' }));
    const refusal = (env: NodeJS.ProcessEnv, store?: string) => {
      try {
        loadServeConfig(env, { configFile: file, ...(store !== undefined && { store }) });
      } catch (err) {
        return { type: (err as Error).constructor.name, message: (err as Error).message };
      }
    };
    const understood = 'only postgres:// and postgresql:// URLs or a file path are understood';
    expect(refusal({}, 'mysql://elig@db/x')).toEqual({ type: 'ConfigError', message: `--store: ${understood}` });
    expect(refusal({ DENTAL_ELIG_STORE: 'mysql://elig:hunter2@db/x' })).toEqual({ type: 'ConfigError', message: `DENTAL_ELIG_STORE: ${understood}` });
    expect(refusal({})).toEqual({ type: 'ConfigError', message: `store (config file): ${understood}` });
    expect(refusal({ DENTAL_ELIG_STORE: 'postgres://elig:hunter2@[db/x' })).toEqual({ type: 'ConfigError', message: 'DENTAL_ELIG_STORE: the postgres:// URL is not a valid URL' });
    expect(loadServeConfig({}, { configFile: file, store: 'stores/jobs.sqlite' }).store).toBe('stores/jobs.sqlite');
  });

  it('refuses an empty store location rather than letting it stand over the file\'s and open SQLite in the data dir', () => {
    const file = path.join(dir, 'dental-elig.config.json');
    writeFileSync(file, JSON.stringify({ store: 'postgres://elig@db.internal/eligibility' }));
    const empty = 'must not be empty (leave it out for the SQLite store in the data dir)';
    expect(() => loadServeConfig({ DENTAL_ELIG_STORE: '' }, { configFile: file })).toThrow(`DENTAL_ELIG_STORE: ${empty}`);
    expect(() => loadServeConfig({}, { configFile: file, store: '' })).toThrow(`--store: ${empty}`);
    writeFileSync(file, JSON.stringify({ store: ' ' }));
    expect(() => loadServeConfig({}, { configFile: file })).toThrow(`store (config file): ${empty}`);
  });
});
