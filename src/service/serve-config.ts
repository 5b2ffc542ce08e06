import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import * as z from 'zod';
import { describeIssue } from '../domain/issues';
import { SyncSettings } from './eligibility-sync';

/**
 * What `serve` runs with: a JSON config file for settings (never secrets) overlaid by the
 * environment, where the secrets live. Validated with zod; a problem is one line naming the
 * setting.
 */
export const ServeFile = z.strictObject({
  $comment: z.string().optional(),
  dataDir: z.string().min(1).optional(),
  /** The job store: a file path (SQLite, relative to the data dir) or a postgres:// URL shared by several instances. */
  store: z.string().min(1).optional(),
  host: z.string().min(1).optional(),
  mllpPort: z.number().int().min(0).max(65535).optional(),
  httpPort: z.number().int().min(0).max(65535).optional(),
  baseUrl: z.string().optional(),
  apiKeyHeader: z.string().optional(),
  apiKeyScheme: z.string().optional(),
  customerId: z.string().optional(),
  timeoutMs: z.number().int().positive().optional(),
  maxRetries: z.number().int().min(0).optional(),
  fhirUrl: z.string().optional(),
  /** SMART Backend Services for the chart: the token endpoint (default: the server's smart-configuration) and the key's kid. */
  fhirTokenEndpoint: z.string().optional(),
  fhirKeyId: z.string().optional(),
  /** How the service's webhooks authenticate: a Standard Webhooks signature (default) or a static bearer token. */
  webhookScheme: z.enum(['standard-webhooks', 'bearer']).optional(),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).optional(),
  settings: SyncSettings.optional(),
  apiKey: z.never({ error: 'secrets do not belong in the config file; set DENTAL_ELIG_API_KEY' }).optional(),
  webhookSecret: z.never({ error: 'secrets do not belong in the config file; set DENTAL_ELIG_WEBHOOK_SECRET' }).optional(),
});
export type ServeFile = z.infer<typeof ServeFile>;

export interface ServeConfig {
  dataDir: string;
  /** Nothing: SQLite in the data dir; a path; or a postgres:// URL. */
  store?: string;
  host: string;
  mllpPort: number;
  httpPort: number;
  /** Absent: run the sandbox in-process. */
  service?: { baseUrl: string; apiKey: string; apiKeyHeader?: string; apiKeyScheme?: string; timeoutMs?: number; maxRetries?: number };
  customerId?: string;
  /** Absent: serve the embedded FHIR server at /fhir on the HTTP port. */
  fhir?: { baseUrl: string; bearerToken?: string; smart?: { clientId: string; privateKey: string; keyId?: string; tokenEndpoint?: string } };
  webhook: { scheme: 'standard-webhooks'; secret?: string } | { scheme: 'bearer'; token: string };
  logLevel: string;
  settings: SyncSettings;
}

export const DEFAULT_DATA_DIR = path.join('.dental-elig', 'data');

export class ConfigError extends Error {}

export function loadServeConfig(env: NodeJS.ProcessEnv, overrides: { configFile?: string; dataDir?: string; store?: string; mllpPort?: number; httpPort?: number }): ServeConfig {
  const file = overrides.configFile ?? env.DENTAL_ELIG_CONFIG ?? (existsSync('dental-elig.config.json') ? 'dental-elig.config.json' : undefined);
  const fromFile = file ? readServeFile(file) : {};
  const baseUrl = env.DENTAL_ELIG_BASE_URL ?? fromFile.baseUrl;
  const apiKey = env.DENTAL_ELIG_API_KEY;
  if (baseUrl && !apiKey) throw new ConfigError('DENTAL_ELIG_API_KEY: not set; a service base URL needs its API key');
  const scheme = fromFile.webhookScheme ?? 'standard-webhooks';
  const webhookSecret = env.DENTAL_ELIG_WEBHOOK_SECRET;
  if (scheme === 'standard-webhooks' && webhookSecret !== undefined && !/^whsec_[A-Za-z0-9+/=]+$/.test(webhookSecret)) {
    throw new ConfigError('DENTAL_ELIG_WEBHOOK_SECRET: must be a Standard Webhooks secret, whsec_ followed by base64');
  }
  if (scheme === 'bearer' && !env.DENTAL_ELIG_WEBHOOK_TOKEN) throw new ConfigError('DENTAL_ELIG_WEBHOOK_TOKEN: not set; webhookScheme bearer needs it');
  if (baseUrl && scheme === 'standard-webhooks' && !webhookSecret) {
    throw new ConfigError('DENTAL_ELIG_WEBHOOK_SECRET: not set; the service signs its webhooks with it (or set webhookScheme to bearer)');
  }
  const fhirUrl = env.DENTAL_ELIG_FHIR_URL ?? fromFile.fhirUrl;
  for (const [name, url] of [['DENTAL_ELIG_BASE_URL', baseUrl], ['DENTAL_ELIG_FHIR_URL', fhirUrl]] as const) {
    if (url !== undefined && !/^https?:\/\/[^\s]+$/.test(url)) throw new ConfigError(`${name}: must be an http(s) URL`);
  }
  const customerId = env.DENTAL_ELIG_CUSTOMER_ID ?? fromFile.customerId;
  const fhirToken = env.DENTAL_ELIG_FHIR_TOKEN;
  const smartClient = env.DENTAL_ELIG_FHIR_CLIENT_ID;
  const keyFile = env.DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE;
  if (Boolean(smartClient) !== Boolean(keyFile)) throw new ConfigError('DENTAL_ELIG_FHIR_CLIENT_ID and DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE: SMART Backend Services needs both');
  if (smartClient && fhirToken) throw new ConfigError('DENTAL_ELIG_FHIR_TOKEN: give a static token or SMART Backend Services, not both');
  const smart = smartClient && keyFile ? { clientId: smartClient, privateKey: readSecretFile('DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE', keyFile), ...defined({ keyId: fromFile.fhirKeyId, tokenEndpoint: fromFile.fhirTokenEndpoint }) } : undefined;
  const store = storeLocation(env, overrides.store, fromFile.store);
  return {
    dataDir: overrides.dataDir ?? env.DENTAL_ELIG_DATA_DIR ?? fromFile.dataDir ?? DEFAULT_DATA_DIR,
    ...(store && { store }),
    host: fromFile.host ?? '127.0.0.1',
    mllpPort: overrides.mllpPort ?? fromFile.mllpPort ?? 2575,
    httpPort: overrides.httpPort ?? fromFile.httpPort ?? 8090,
    ...(baseUrl && apiKey && {
      service: {
        baseUrl,
        apiKey,
        ...defined({ apiKeyHeader: env.DENTAL_ELIG_API_KEY_HEADER ?? fromFile.apiKeyHeader, apiKeyScheme: env.DENTAL_ELIG_API_KEY_SCHEME ?? fromFile.apiKeyScheme, timeoutMs: fromFile.timeoutMs, maxRetries: fromFile.maxRetries }),
      },
    }),
    ...(customerId && { customerId }),
    ...(fhirUrl && { fhir: { baseUrl: fhirUrl.replace(/\/+$/, ''), ...(fhirToken && { bearerToken: fhirToken }), ...(smart && { smart }) } }),
    webhook: scheme === 'bearer' ? { scheme, token: env.DENTAL_ELIG_WEBHOOK_TOKEN as string } : { scheme, ...(webhookSecret && { secret: webhookSecret }) },
    logLevel: env.DENTAL_ELIG_LOG_LEVEL ?? fromFile.logLevel ?? 'info',
    settings: fromFile.settings ?? {},
  };
}

/**
 * Where the job store is: --store, then DENTAL_ELIG_STORE, then the config file. A database
 * password never goes on the command line: it comes with DENTAL_ELIG_STORE or PGPASSWORD.
 */
export function storeLocation(env: NodeJS.ProcessEnv, fromArgs: string | undefined, fromFile: string | undefined): string | undefined {
  if (fromArgs !== undefined && /^postgres(ql)?:\/\//i.test(fromArgs) && URL.canParse(fromArgs) && new URL(fromArgs).password) {
    throw new ConfigError('--store: a password does not belong on the command line; set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE');
  }
  return fromArgs ?? env.DENTAL_ELIG_STORE ?? fromFile;
}

function readServeFile(file: string): ServeFile {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(`${file}: ${code === 'ENOENT' ? 'no such config file' : 'not valid JSON'}`);
  }
  const parsed = ServeFile.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`${file}: ${describeIssue(parsed.error)}`);
  return parsed.data;
}

function readSecretFile(name: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${name}: ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

function defined<T extends Record<string, unknown>>(obj: T): Partial<T> {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined)) as Partial<T>;
}
