import { existsSync, statSync } from 'node:fs';
import * as path from 'node:path';
import * as z from 'zod';
import { describeIssue } from '../domain/issues';
import type { ClientConfigInput } from '../verification/config';
import { storeLocationProblem } from '../sync/open-store';
import { InlineCredentials } from '../verification/wire';
import { isWebhookSecret, notAWebhookSecret } from '../verification/webhook';
import { ConfigError } from '../config-error';
import { clientConfig, type ConfigFile, insecureHttpAllowed, LogLevel, readConfigFile, readSecretFile, serviceSettings, settingSource, withoutUndefined } from './config-file';
import { CHART_TRAFFIC, TOKEN_TRAFFIC, carriesCredentials, isHttpUrl, isPlainHttpAcrossNetwork, onThisMachine, plainHttpRefused } from '../url-checks';
import { DEFAULT_DATA_DIR, type SyncSettings } from './eligibility-sync';

/**
 * What `serve` runs with: the settings file (never secrets) overlaid by the environment, where
 * the secrets live. A problem is one line naming the setting.
 */
export interface ServeConfig {
  dataDir: string;
  /** Nothing: SQLite in the data dir; a path; or a postgres:// URL. */
  store?: string;
  host: string;
  mllpPort: number;
  httpPort: number;
  /** Absent: run the sandbox in-process. */
  service?: ClientConfigInput;
  /** The file's per-attempt timeout and retries, for the in-process sandbox too: a rehearsal on it behaves as against the service. */
  serviceTuning?: Pick<ClientConfigInput, 'timeoutMs' | 'maxRetries'>;
  customerId?: string;
  /** Absent: serve the embedded FHIR server at /fhir on the HTTP port. */
  fhir?: { baseUrl: string; bearerToken?: string; smart?: { clientId: string; privateKey: string; keyId?: string; tokenEndpoint?: string }; allowInsecureHttp?: boolean };
  webhook: { scheme: 'standard-webhooks'; secret?: string; previousSecret?: string } | { scheme: 'bearer'; token: string };
  /** From DENTAL_ELIG_NOTIFICATION_TOKEN: the bearer token FHIR notifications must carry; absent, they are taken from anyone who reaches serve. */
  notificationToken?: string;
  /** From DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: { portalId: { username, password } } for portals without stored credentials. */
  inlineCredentials?: Record<string, InlineCredentials>;
  logLevel: string;
  settings: SyncSettings;
}

export function loadServeConfig(env: NodeJS.ProcessEnv, overrides: { configFile?: string; dataDir?: string; store?: string; mllpPort?: number; httpPort?: number }): ServeConfig {
  const fromFile = readConfigFile(env, overrides.configFile);
  const { baseUrl, apiKey, ...client } = serviceSettings(env, fromFile);
  if (baseUrl && !apiKey) throw new ConfigError('DENTAL_ELIG_API_KEY: not set; a service base URL needs its API key (or DENTAL_ELIG_API_KEY_FILE)');
  const scheme = fromFile.webhookScheme ?? 'standard-webhooks';
  const webhookSecret = env.DENTAL_ELIG_WEBHOOK_SECRET;
  if (scheme === 'standard-webhooks' && webhookSecret !== undefined && !isWebhookSecret(webhookSecret)) {
    throw new ConfigError(notAWebhookSecret('DENTAL_ELIG_WEBHOOK_SECRET'));
  }
  // While a secret is rotated, the service may still sign with the one before it.
  const previousSecret = env.DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET || undefined;
  if (previousSecret !== undefined && (scheme !== 'standard-webhooks' || !webhookSecret)) {
    throw new ConfigError('DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET: only beside DENTAL_ELIG_WEBHOOK_SECRET, the secret that replaces it');
  }
  if (previousSecret !== undefined && !isWebhookSecret(previousSecret)) throw new ConfigError(notAWebhookSecret('DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET'));
  if (scheme === 'bearer' && !env.DENTAL_ELIG_WEBHOOK_TOKEN) throw new ConfigError('DENTAL_ELIG_WEBHOOK_TOKEN: not set; webhookScheme bearer needs it');
  if (baseUrl && scheme === 'standard-webhooks' && !webhookSecret) {
    throw new ConfigError('DENTAL_ELIG_WEBHOOK_SECRET: not set; the service signs its webhooks with it (or set webhookScheme to bearer)');
  }
  const service = baseUrl && apiKey ? { ...client, baseUrl, apiKey } : undefined;
  // Refused here, as setup and verify refuse it, rather than when serve builds its client.
  if (service) clientConfig(service, env);
  const fhir = chartSettings(env, fromFile);
  const fhirUrl = fhir?.baseUrl;
  // Without the service's URL serve runs the sandbox in-process: its made-up eligibility belongs in no chart but one on this machine.
  if (fhirUrl !== undefined && !baseUrl && !onThisMachine(fhirUrl)) {
    throw new ConfigError(
      'DENTAL_ELIG_BASE_URL: not set, so the in-process sandbox would write made-up eligibility into the chart DENTAL_ELIG_FHIR_URL names; set the service\'s URL, or for a test chart run `dental-elig sandbox` and set its URL',
    );
  }
  const customerId = env.DENTAL_ELIG_CUSTOMER_ID ?? fromFile.customerId;
  const store = storeLocation(env, overrides.store, fromFile.store);
  const logLevel = LogLevel.safeParse(env.DENTAL_ELIG_LOG_LEVEL ?? fromFile.logLevel ?? 'info');
  if (!logLevel.success) throw new ConfigError(`DENTAL_ELIG_LOG_LEVEL: must be one of ${LogLevel.options.join(', ')}`);
  const notificationToken = env.DENTAL_ELIG_NOTIFICATION_TOKEN;
  // Empty (an unfilled line of an environment file) it read as none: notifications taken from anyone, with nothing said on this machine.
  if (notificationToken?.trim() === '') throw new ConfigError('DENTAL_ELIG_NOTIFICATION_TOKEN: must not be empty (leave it out to take notifications without a token)');
  const credentialsFile = env.DENTAL_ELIG_PORTAL_CREDENTIALS_FILE;
  const inlineCredentials = credentialsFile ? readPortalCredentials(credentialsFile) : undefined;
  const [dataDirName, dataDir] = dataDirSetting(env, overrides.dataDir, fromFile);
  const notAFolder = fileInTheWay(dataDir);
  if (notAFolder) throw new ConfigError(`${dataDirName}: ${notAFolder === path.resolve(dataDir) ? `${notAFolder} is a file, not a folder` : `${notAFolder} is a file, so no folder can be made under it`}`);
  return {
    dataDir,
    ...(store && { store }),
    host: fromFile.host ?? '127.0.0.1',
    mllpPort: overrides.mllpPort ?? fromFile.mllpPort ?? 2575,
    httpPort: overrides.httpPort ?? fromFile.httpPort ?? 8090,
    ...(service && { service }),
    serviceTuning: withoutUndefined({ timeoutMs: client.timeoutMs, maxRetries: client.maxRetries }),
    ...(customerId && { customerId }),
    ...(inlineCredentials && { inlineCredentials }),
    ...(fhir && { fhir }),
    ...(notificationToken !== undefined && { notificationToken }),
    webhook: scheme === 'bearer' ? { scheme, token: env.DENTAL_ELIG_WEBHOOK_TOKEN as string } : { scheme, ...(webhookSecret && { secret: webhookSecret }), ...(previousSecret && { previousSecret }) },
    logLevel: logLevel.data,
    settings: fromFile.settings ?? {},
  };
}

/**
 * The data dir, and where it was given: --data-dir, then DENTAL_ELIG_DATA_DIR, then the config file
 * (serve, and `jobs` finding serve's store). The file's own dataDir is refused empty by its schema;
 * an empty variable (an unfilled line of an environment file) is refused here, as a setting.
 */
export function dataDirSetting(env: NodeJS.ProcessEnv, fromArgs: string | undefined, fromFile: ConfigFile): [name: string, dir: string] {
  const [name, dir] = fromArgs !== undefined ? ['--data-dir', fromArgs] : env.DENTAL_ELIG_DATA_DIR !== undefined ? ['DENTAL_ELIG_DATA_DIR', env.DENTAL_ELIG_DATA_DIR] : ['dataDir (config file)', fromFile.dataDir ?? DEFAULT_DATA_DIR];
  // Spaces too (an environment file's line with a space after =, a config file's "dataDir": " "): a folder of that name in the working one, another store than serve's.
  if (dir.trim() === '') throw new ConfigError(`${name}: must not be empty (leave it out for ${DEFAULT_DATA_DIR})`);
  return [name, dir];
}

/**
 * The chart serve reads and writes, from the environment over the file: its URL, and a static
 * token or SMART Backend Services; undefined for the embedded one. `jobs replay` reads it as serve does.
 */
export function chartSettings(env: NodeJS.ProcessEnv, fromFile: ConfigFile): ServeConfig['fhir'] {
  const fhirUrl = env.DENTAL_ELIG_FHIR_URL ?? fromFile.fhirUrl;
  const fhirUrlSource = settingSource(env, 'DENTAL_ELIG_FHIR_URL', 'fhirUrl');
  const allowInsecureHttp = insecureHttpAllowed(env, fromFile);
  if (fhirUrl !== undefined && !isHttpUrl(fhirUrl)) throw new ConfigError(`${fhirUrlSource}: must be an http(s) URL`);
  if (fhirUrl !== undefined && carriesCredentials(fhirUrl)) throw new ConfigError(`${fhirUrlSource}: credentials do not belong in the URL; set DENTAL_ELIG_FHIR_TOKEN`);
  // The chart's URL, and the SMART token endpoint its tokens come from, under the same rule as the service's (the client's own config refuses that one).
  for (const [name, url, sent] of [[fhirUrlSource, fhirUrl, CHART_TRAFFIC], ['fhirTokenEndpoint (config file)', fromFile.fhirTokenEndpoint, TOKEN_TRAFFIC]] as const) {
    if (url !== undefined && isPlainHttpAcrossNetwork(url) && !allowInsecureHttp) throw new ConfigError(`${name}: ${plainHttpRefused(sent, 'DENTAL_ELIG_ALLOW_INSECURE_HTTP=1')}`);
  }
  const fhirToken = env.DENTAL_ELIG_FHIR_TOKEN;
  const smartClient = env.DENTAL_ELIG_FHIR_CLIENT_ID;
  const keyFile = env.DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE;
  if (Boolean(smartClient) !== Boolean(keyFile)) throw new ConfigError('DENTAL_ELIG_FHIR_CLIENT_ID and DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE: SMART Backend Services needs both');
  if (smartClient && fhirToken) throw new ConfigError('DENTAL_ELIG_FHIR_TOKEN: give a static token or SMART Backend Services, not both');
  const smart = smartClient && keyFile ? { clientId: smartClient, privateKey: readSecretFile('DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE', keyFile), ...withoutUndefined({ keyId: fromFile.fhirKeyId, tokenEndpoint: fromFile.fhirTokenEndpoint }) } : undefined;
  if (!fhirUrl) return undefined;
  return { baseUrl: fhirUrl.replace(/\/+$/, ''), ...(fhirToken && { bearerToken: fhirToken }), ...(smart && { smart }), ...(allowInsecureHttp && { allowInsecureHttp: true }) };
}

const PortalCredentials = z.record(z.string().min(1), InlineCredentials);

/** Inline portal credentials from a file the environment names (a secret: never in the config file or on argv). */
function readPortalCredentials(file: string): Record<string, InlineCredentials> {
  let raw: unknown;
  try {
    raw = JSON.parse(readSecretFile('DENTAL_ELIG_PORTAL_CREDENTIALS_FILE', file));
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError('DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: not valid JSON');
  }
  const parsed = PortalCredentials.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`DENTAL_ELIG_PORTAL_CREDENTIALS_FILE: ${describeIssue(parsed.error)}`);
  return parsed.data;
}

/** The file that stands where the data dir, or a folder above it, would be, if one does: mkdir would say only EEXIST or ENOTDIR. */
function fileInTheWay(dir: string): string | undefined {
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    const found = existsSync(at) ? statSync(at) : undefined;
    if (found) return found.isDirectory() ? undefined : at;
    if (path.dirname(at) === at) return undefined;
  }
}

/**
 * Where the job store is: --store, then DENTAL_ELIG_STORE, then the config file. A database
 * password never goes on the command line: it comes with DENTAL_ELIG_STORE or PGPASSWORD.
 */
export function storeLocation(env: NodeJS.ProcessEnv, fromArgs: string | undefined, fromFile: string | undefined): string | undefined {
  if (fromArgs !== undefined && /^postgres(ql)?:\/\//i.test(fromArgs) && URL.canParse(fromArgs) && new URL(fromArgs).password) {
    throw new ConfigError('--store: a password does not belong on the command line; set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE');
  }
  const [name, location] = fromArgs !== undefined ? ['--store', fromArgs] : env.DENTAL_ELIG_STORE !== undefined ? ['DENTAL_ELIG_STORE', env.DENTAL_ELIG_STORE] : ['store (config file)', fromFile];
  // An empty one (an unfilled line of an environment file) would stand over the file's and open SQLite in the data dir: another store than the instances share.
  if (location?.trim() === '') throw new ConfigError(`${name}: must not be empty (leave it out for the SQLite store in the data dir)`);
  // Refused as a setting, before anything is opened, rather than as a store that failed to open.
  const problem = location === undefined ? undefined : storeLocationProblem(location);
  if (problem) throw new ConfigError(`${name}: ${problem}`);
  return location;
}
