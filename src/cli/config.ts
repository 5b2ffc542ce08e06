import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import * as z from 'zod';
import { describeIssue } from '../domain/issues';
import { ClientConfig } from '../verification/config';
import { CliError } from './io';

/**
 * Settings come from a JSON config file (non-secret settings only) overlaid by environment
 * variables. The API key comes from DENTAL_ELIG_API_KEY or a key file, never from the command
 * line or the config file, so it stays out of shell history, process listings and repositories.
 */
const ConfigFile = z.strictObject({
  $comment: z.string().optional(),
  baseUrl: z.string().optional(),
  apiKeyFile: z.string().optional(),
  apiKeyHeader: z.string().optional(),
  apiKeyScheme: z.string().optional(),
  customerId: z.string().optional(),
  timeoutMs: z.number().int().positive().optional(),
  maxRetries: z.number().int().min(0).optional(),
  catalogFile: z.string().optional(),
  allowInsecureHttp: z.boolean().optional(),
  apiKey: z.never({ error: 'secrets do not belong in the config file; set DENTAL_ELIG_API_KEY or apiKeyFile' }).optional(),
});

export const DEFAULT_CONFIG_FILE = 'dental-elig.config.json';
export const DEFAULT_CATALOG_FILE = path.join('.dental-elig', 'catalog.json');

export interface CliSettings {
  client: ClientConfig;
  customerId: string | undefined;
  catalogFile: string;
}

export function loadSettings(env: NodeJS.ProcessEnv, configFile?: string): CliSettings {
  const file = configFile ?? env.DENTAL_ELIG_CONFIG ?? (existsSync(DEFAULT_CONFIG_FILE) ? DEFAULT_CONFIG_FILE : undefined);
  const fromFile = file ? readConfigFile(file) : {};
  const apiKeyFile = env.DENTAL_ELIG_API_KEY_FILE ?? fromFile.apiKeyFile;
  const apiKey = env.DENTAL_ELIG_API_KEY ?? (apiKeyFile ? readKeyFile(apiKeyFile) : undefined);
  const baseUrl = env.DENTAL_ELIG_BASE_URL ?? fromFile.baseUrl;
  if (!baseUrl) throw new CliError('baseUrl: not configured; set DENTAL_ELIG_BASE_URL or baseUrl in the config file');
  if (!apiKey) throw new CliError('apiKey: not configured; set DENTAL_ELIG_API_KEY or DENTAL_ELIG_API_KEY_FILE');
  const parsed = ClientConfig.safeParse({
    baseUrl,
    apiKey,
    ...defined({
      apiKeyHeader: env.DENTAL_ELIG_API_KEY_HEADER ?? fromFile.apiKeyHeader,
      apiKeyScheme: env.DENTAL_ELIG_API_KEY_SCHEME ?? fromFile.apiKeyScheme,
      timeoutMs: fromFile.timeoutMs,
      maxRetries: fromFile.maxRetries,
      allowInsecureHttp: env.DENTAL_ELIG_ALLOW_INSECURE_HTTP === undefined ? fromFile.allowInsecureHttp : env.DENTAL_ELIG_ALLOW_INSECURE_HTTP === '1',
    }),
  });
  if (!parsed.success) {
    throw new CliError(describeIssue(parsed.error, 'config'));
  }
  return {
    client: parsed.data,
    customerId: env.DENTAL_ELIG_CUSTOMER_ID ?? fromFile.customerId,
    catalogFile: env.DENTAL_ELIG_CATALOG ?? fromFile.catalogFile ?? DEFAULT_CATALOG_FILE,
  };
}

function readConfigFile(file: string): z.infer<typeof ConfigFile> {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CliError(`${file}: ${code === 'ENOENT' ? 'no such config file' : 'not valid JSON'}`);
  }
  const parsed = ConfigFile.safeParse(raw);
  if (!parsed.success) {
    throw new CliError(`${file}: ${describeIssue(parsed.error)}`);
  }
  return parsed.data;
}

function readKeyFile(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    throw new CliError(`apiKeyFile: ${file} cannot be read`);
  }
}

function defined<T extends Record<string, unknown>>(obj: T): Partial<T> {
  return Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== undefined)) as Partial<T>;
}
