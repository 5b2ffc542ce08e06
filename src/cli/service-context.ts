import type { Command } from 'commander';
import { ServiceError } from '../verification/errors';
import { VerificationClient } from '../verification/client';
import { loadSettings, type CliSettings } from './config';
import { CliError, say, type CliIo } from './io';

/** An environment variable a command reads, and what for. */
export type EnvVar = readonly [name: string, what: string];

export const ENV = {
  baseUrl: ['DENTAL_ELIG_BASE_URL', 'the service root, e.g. https://… (or baseUrl in the config file)'],
  apiKey: ['DENTAL_ELIG_API_KEY', 'the API key (or DENTAL_ELIG_API_KEY_FILE naming a file that holds it)'],
  insecure: ['DENTAL_ELIG_ALLOW_INSECURE_HTTP', '1, true or yes allows a plain http:// base URL for a host other than this machine'],
  customerId: ['DENTAL_ELIG_CUSTOMER_ID', 'the customer id issued at onboarding (or --customer)'],
  password: ['DENTAL_ELIG_PORTAL_PASSWORD', 'the portal password (or --password-stdin)'],
  catalog: ['DENTAL_ELIG_CATALOG', 'the payer catalog file (default .dental-elig/catalog.json)'],
  config: ['DENTAL_ELIG_CONFIG', 'the settings file (or --config; default ./dental-elig.config.json)'],
  fhirUrl: ['DENTAL_ELIG_FHIR_URL', "the chart's FHIR base (or fhirUrl in the config file)"],
  fhirToken: ['DENTAL_ELIG_FHIR_TOKEN', 'a static bearer token for the FHIR server'],
  fhirClientId: ['DENTAL_ELIG_FHIR_CLIENT_ID', 'SMART Backend Services client id, with DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE'],
  fhirKeyFile: ['DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE', "the SMART client's private key, PEM"],
  dataDir: ['DENTAL_ELIG_DATA_DIR', 'the data dir (or --data-dir)'],
  store: ['DENTAL_ELIG_STORE', 'the job store, e.g. postgres://user:password@host/db (or --store, without the password)'],
  mappings: ['DENTAL_ELIG_MAPPINGS', "a copy of mappings/ to run with (default: the package's own)"],
  apiKeyHeader: ['DENTAL_ELIG_API_KEY_HEADER', 'the header the API key goes in (default authorization; or apiKeyHeader in the config file)'],
  apiKeyScheme: ['DENTAL_ELIG_API_KEY_SCHEME', 'the scheme before the key (default Bearer; empty for a bare key, as x-api-key takes it)'],
  fhirSystemBase: ['DENTAL_ELIG_FHIR_SYSTEM_BASE', "the base of the plugin's own code and identifier systems written into the chart (an absolute URL)"],
  fhirExtensionBase: ['DENTAL_ELIG_FHIR_EXTENSION_BASE', "the base of the plugin's extension URLs written into the chart (an absolute URL)"],
} as const satisfies Record<string, EnvVar>;

/** What every command that talks to the service reads. */
export const SERVICE_ENV: readonly EnvVar[] = [ENV.baseUrl, ENV.apiKey, ENV.apiKeyHeader, ENV.apiKeyScheme, ENV.insecure, ENV.config];

/** Names, in the command's own --help, the environment variables it reads. */
export function readsEnvironment(command: Command, vars: readonly EnvVar[]): Command {
  const width = Math.max(...vars.map(([name]) => name.length));
  return command.addHelpText('after', `\nEnvironment:\n${vars.map(([name, what]) => `  ${name.padEnd(width)}  ${what}`).join('\n')}\n`);
}

/** Commands that talk to the service run inside this: it builds the client (cutting `secrets` out of every answer) and closes it. */
export async function withService<T>(
  io: CliIo,
  command: Command,
  run: (client: VerificationClient, settings: CliSettings) => Promise<T>,
  options: { secrets?: readonly string[] } = {},
): Promise<T> {
  const settings = loadSettings(io.env, command.optsWithGlobals<{ config?: string }>().config);
  const client = new VerificationClient(settings.client, {
    log: {
      warn: (_obj, msg) => say(io, `warning: ${msg}`),
      debug: () => undefined,
    },
    ...options,
  });
  try {
    return await run(client, settings);
  } catch (err) {
    throw err instanceof ServiceError ? toCliError(err) : err;
  } finally {
    await client.close();
  }
}

/** A service failure as one line: the operation, status, problem and field errors, and when to try again if the service said. */
export function toCliError(err: ServiceError): CliError {
  const reportId = err.status !== undefined && err.status >= 500 && err.requestId ? ` (report request id ${err.requestId})` : '';
  const tryAgain = err.retryAfterMs !== undefined ? ` (the service asks for ${Math.ceil(err.retryAfterMs / 1000)} s before another try)` : '';
  return new CliError(`${err.message}${reportId}${tryAgain}`);
}
