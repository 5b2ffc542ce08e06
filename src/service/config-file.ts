import { existsSync, readFileSync } from 'node:fs';
import * as z from 'zod';
import { ConfigError } from '../config-error';
import { describeIssue } from '../domain/issues';
import { describeJsonSyntax } from '../verification/json-syntax';
import { utf8Text, UTF16_REFUSED } from '../text-file';
import { ClientConfig, type ClientConfigInput } from '../verification/config';
import { SyncSettings } from './eligibility-sync';

export const LogLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/**
 * The one settings file every command reads (`--config FILE`, DENTAL_ELIG_CONFIG, or
 * ./dental-elig.config.json): non-secret settings only, overlaid by the environment, where the
 * secrets live. Setup commands and `serve` read the same file, so one file serves a deployment.
 */
export const ConfigFile = z.strictObject({
  $comment: z.string().optional(),
  // The verification service
  baseUrl: z.string().optional(),
  apiKeyFile: z.string().optional(),
  apiKeyHeader: z.string().optional(),
  apiKeyScheme: z.string().optional(),
  customerId: z.string().optional(),
  timeoutMs: z.number().int().positive().optional(),
  maxRetries: z.number().int().min(0).max(10).optional(),
  allowInsecureHttp: z.boolean().optional(),
  catalogFile: z.string().optional(),
  // serve
  dataDir: z.string().min(1).optional(),
  /** The job store: a file path (SQLite, relative to the data dir) or a postgres:// URL shared by several instances. */
  store: z.string().min(1).optional(),
  host: z.string().min(1).optional(),
  mllpPort: z.number().int().min(0).max(65535).optional(),
  httpPort: z.number().int().min(0).max(65535).optional(),
  fhirUrl: z.string().optional(),
  /** SMART Backend Services for the chart: the token endpoint (default: the server's smart-configuration) and the key's kid. */
  fhirTokenEndpoint: z.string().optional(),
  fhirKeyId: z.string().optional(),
  /** How the service's webhooks authenticate: a Standard Webhooks signature (default) or a static bearer token. */
  webhookScheme: z.enum(['standard-webhooks', 'bearer']).optional(),
  logLevel: LogLevel.optional(),
  settings: SyncSettings.optional(),
  apiKey: z.never({ error: 'secrets do not belong in the config file; set DENTAL_ELIG_API_KEY or apiKeyFile' }).optional(),
  webhookSecret: z.never({ error: 'secrets do not belong in the config file; set DENTAL_ELIG_WEBHOOK_SECRET' }).optional(),
});
export type ConfigFile = z.infer<typeof ConfigFile>;

export const DEFAULT_CONFIG_FILE = 'dental-elig.config.json';

/** The settings file in force, or {} when there is none. */
export function readConfigFile(env: NodeJS.ProcessEnv, explicit?: string): ConfigFile {
  const file = explicit ?? env.DENTAL_ELIG_CONFIG ?? (existsSync(DEFAULT_CONFIG_FILE) ? DEFAULT_CONFIG_FILE : undefined);
  // Empty (an unfilled line of an environment file) it read no file at all, ./dental-elig.config.json neither: every setting at its default, the sandbox for the service.
  if (file?.trim() === '') throw new ConfigError(`${explicit !== undefined ? '--config' : 'DENTAL_ELIG_CONFIG'}: must not be empty (leave it out for ./${DEFAULT_CONFIG_FILE})`);
  if (!file) return {};
  let text: string | undefined;
  try {
    text = utf8Text(readFileSync(file));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ConfigError(`${file}: ${code === 'ENOENT' ? 'no such config file' : `cannot be read (${code ?? 'error'})`}`);
  }
  if (text === undefined) throw new ConfigError(`${file}: ${UTF16_REFUSED}`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new ConfigError(`${file}: ${describeJsonSyntax(text)}`);
  }
  const parsed = ConfigFile.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`${file}: ${describeIssue(parsed.error)}`);
  return parsed.data;
}

/** The environment variable over each of the service's settings the config file may hold: read by serviceSettings, named by serviceSettingSource. */
const SERVICE_VARIABLES = {
  baseUrl: 'DENTAL_ELIG_BASE_URL',
  apiKeyHeader: 'DENTAL_ELIG_API_KEY_HEADER',
  apiKeyScheme: 'DENTAL_ELIG_API_KEY_SCHEME',
  allowInsecureHttp: 'DENTAL_ELIG_ALLOW_INSECURE_HTTP',
} as const satisfies Partial<Record<keyof ClientConfigInput, string>>;

/** The verification service's settings from the environment over the file; the API key from the environment or a key file. */
export function serviceSettings(env: NodeJS.ProcessEnv, fromFile: ConfigFile): Partial<ClientConfigInput> {
  const apiKeyFile = env.DENTAL_ELIG_API_KEY_FILE ?? fromFile.apiKeyFile;
  const baseUrl = env[SERVICE_VARIABLES.baseUrl] ?? fromFile.baseUrl;
  // Empty (an unfilled line of an environment file) it stood over the file's URL, and serve ran the in-process sandbox instead of the service.
  if (baseUrl?.trim() === '') throw new ConfigError(`${serviceSettingSource(env, 'baseUrl')}: must not be empty (leave it out for serve's in-process sandbox)`);
  return withoutUndefined({
    baseUrl,
    // A key file that cannot be read, or holds nothing, is named where it was set: the environment or the file.
    apiKey: env.DENTAL_ELIG_API_KEY ?? (apiKeyFile ? keyInFile(env.DENTAL_ELIG_API_KEY_FILE !== undefined ? 'DENTAL_ELIG_API_KEY_FILE' : 'apiKeyFile', apiKeyFile) : undefined),
    apiKeyHeader: env[SERVICE_VARIABLES.apiKeyHeader] ?? fromFile.apiKeyHeader,
    apiKeyScheme: env[SERVICE_VARIABLES.apiKeyScheme] ?? fromFile.apiKeyScheme,
    timeoutMs: fromFile.timeoutMs,
    maxRetries: fromFile.maxRetries,
    allowInsecureHttp: insecureHttpAllowed(env, fromFile),
  });
}

/** Whether plain http:// to another host is allowed, for the service and the chart alike: the environment over the file. */
export function insecureHttpAllowed(env: NodeJS.ProcessEnv, fromFile: ConfigFile): boolean | undefined {
  return envFlag(env, SERVICE_VARIABLES.allowInsecureHttp) ?? fromFile.allowInsecureHttp;
}

/**
 * A yes/no environment variable: 1, true or yes; 0, false or no (any case); unset or empty is
 * undefined. Anything else is refused: a typo must not quietly mean no.
 */
export function envFlag(env: NodeJS.ProcessEnv, name: string): boolean | undefined {
  const value = env[name]?.trim().toLowerCase();
  if (value === undefined || value === '') return undefined;
  if (['1', 'true', 'yes'].includes(value)) return true;
  if (['0', 'false', 'no'].includes(value)) return false;
  throw new ConfigError(`${name}: must be 1, true or yes, or 0, false or no`);
}

/**
 * Where a setting was given, as the person who gave it will look for it: the environment
 * variable when it is set (it wins over the file), else the config file's key.
 */
export function settingSource(env: NodeJS.ProcessEnv, variable: string, fileKey: string): string {
  return env[variable] !== undefined ? variable : `${fileKey} (config file)`;
}

/** Where the service's setting `key` came from; the API key from its variable or its file's (serviceSettings). */
function serviceSettingSource(env: NodeJS.ProcessEnv, key: string): string {
  if (key === 'apiKey') return env.DENTAL_ELIG_API_KEY !== undefined ? 'DENTAL_ELIG_API_KEY' : settingSource(env, 'DENTAL_ELIG_API_KEY_FILE', 'apiKeyFile');
  const variable = (SERVICE_VARIABLES as Partial<Record<string, string>>)[key];
  return variable === undefined ? `${key} (config file)` : settingSource(env, variable, key);
}

/**
 * The verification service's settings, checked as the client checks them; a problem is a
 * ConfigError naming the setting where it was given (serviceSettingSource).
 */
export function clientConfig(settings: ClientConfigInput, env: NodeJS.ProcessEnv): ClientConfig {
  const parsed = ClientConfig.safeParse(settings);
  if (parsed.success) return parsed.data;
  // The settings are flat: an issue's path is the one key it is about.
  const issue = parsed.error.issues[0];
  const key = issue?.path[0];
  throw new ConfigError(key === undefined ? describeIssue(parsed.error, 'config') : `${serviceSettingSource(env, String(key))}: ${issue?.message ?? 'invalid'}`);
}

/** The API key a key file holds, without its line end; an empty file would otherwise read as no key set at all. */
function keyInFile(name: string, file: string): string {
  const key = readSecretFile(name, file).trim();
  if (!key) throw new ConfigError(`${name}: ${file} is empty`);
  return key;
}

export function readSecretFile(name: string, file: string): string {
  let text: string | undefined;
  try {
    text = utf8Text(readFileSync(file));
  } catch {
    throw new ConfigError(`${name}: ${file} cannot be read`);
  }
  if (text === undefined) throw new ConfigError(`${name}: ${file}: ${UTF16_REFUSED}`);
  return text;
}

export function withoutUndefined<T extends Record<string, unknown>>(obj: T): Partial<T> {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined)) as Partial<T>;
}
