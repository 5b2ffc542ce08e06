import * as path from 'node:path';
import { ConfigError } from '../config-error';
import { clientConfig, readConfigFile, serviceSettings } from '../service/config-file';
import type { ClientConfig } from '../verification/config';

export const DEFAULT_CATALOG_FILE = path.join('.dental-elig', 'catalog.json');

export interface CliSettings {
  client: ClientConfig;
  customerId: string | undefined;
  catalogFile: string;
}

/**
 * The setup and verify commands' settings: the settings file overlaid by the environment. The API
 * key comes from DENTAL_ELIG_API_KEY or a key file, never from the command line or the config
 * file, so it stays out of shell history, process listings and repositories.
 */
export function loadSettings(env: NodeJS.ProcessEnv, configFile?: string): CliSettings {
  const fromFile = readConfigFile(env, configFile);
  const { baseUrl, apiKey, ...rest } = serviceSettings(env, fromFile);
  if (!baseUrl) throw new ConfigError('baseUrl: not configured; set DENTAL_ELIG_BASE_URL or baseUrl in the config file');
  if (!apiKey) throw new ConfigError('apiKey: not configured; set DENTAL_ELIG_API_KEY or DENTAL_ELIG_API_KEY_FILE');
  return {
    client: clientConfig({ ...rest, baseUrl, apiKey }, env),
    customerId: env.DENTAL_ELIG_CUSTOMER_ID ?? fromFile.customerId,
    catalogFile: env.DENTAL_ELIG_CATALOG ?? fromFile.catalogFile ?? DEFAULT_CATALOG_FILE,
  };
}
