import type { Command } from 'commander';
import { ConfigError } from '../config-error';
import { withoutUndefined } from '../service/config-file';
import { keepHeapNearLive } from '../service/heap-growth';
import { loadServeConfig } from '../service/serve-config';
import { serve } from '../service/serve';
import { errorText } from '../sync/error-text';
import { CliError, port, type CliIo } from './io';
import { ENV, readsEnvironment, type EnvVar } from './service-context';
import { stopped } from './stopped';

interface ServeOpts {
  dataDir?: string;
  store?: string;
  mllpPort?: number;
  httpPort?: number;
}

/**
 * `dental-elig serve`: the sidecar. Settings from the config file and the environment; secrets
 * from the environment only. Prints one `listening:` line per listener, runs until SIGINT or
 * SIGTERM, and on the same data dir resumes where it stopped.
 */
export function registerServe(program: Command, io: CliIo): void {
  const command = program
    .command('serve')
    .description('Run the sync service: HL7 v2 over MLLP, the verification webhook, FHIR notifications, /healthz and /metrics')
    .option('--data-dir <dir>', 'where the job store and the payer catalog live (default .dental-elig/data)')
    .option('--store <location>', 'the job store: a SQLite file (default: in the data dir) or postgres://user@host/db shared by several instances (password from PGPASSWORD or DENTAL_ELIG_STORE)')
    .option('--mllp-port <n>', 'MLLP port (0: any free port; default 2575)', port('--mllp-port'))
    .option('--http-port <n>', 'HTTP port (0: any free port; default 8090)', port('--http-port'))
    .action(async (opts: ServeOpts, command: Command) => {
      const config = loadServeConfig(io.env, {
        ...withoutUndefined({ configFile: command.optsWithGlobals<{ config?: string }>().config, dataDir: opts.dataDir, store: opts.store, mllpPort: opts.mllpPort, httpPort: opts.httpPort }),
      });
      // A process-wide setting: the sidecar owns its process, an application that embeds the library does not.
      keepHeapNearLive();
      let serving;
      try {
        serving = await serve(config, { line: (text) => io.stdout.write(`${text}\n`) });
      } catch (err) {
        // A mapping or a variable that cannot be used (read as the sync is created) is a configuration error, as the config file's are.
        if (err instanceof ConfigError) throw err;
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EADDRINUSE' || code === 'EACCES') throw new CliError(`serve: cannot listen (${code}); choose other ports with --mllp-port and --http-port`);
        // The address to listen on comes from the config file alone: one this machine does not have (a typo, another host's) is that setting's to fix.
        const address = (err as { hostname?: string; address?: string }).hostname ?? (err as { address?: string }).address;
        if ((code === 'ENOTFOUND' || code === 'EADDRNOTAVAIL') && address === config.host) {
          throw new ConfigError(`host (config file): cannot listen on ${config.host} (${code === 'ENOTFOUND' ? 'no such host' : 'not an address of this machine'})`);
        }
        throw new CliError(`serve: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
      }
      await stopped(io.signal);
      // A part that failed to close (each named in the log) is a stop that did not go cleanly: not exit 0.
      await serving.close().catch((err: unknown) => {
        throw new CliError(`serve: ${errorText(err)}; see the log`);
      });
      io.stdout.write('stopped\n');
    });
  readsEnvironment(command, SERVE_ENV);
}

/** What serve reads (README, "The sync service"): secrets only from here, never the config file or argv. */
const SERVE_ENV: readonly EnvVar[] = [
  [ENV.baseUrl[0], 'the service root (without it, the sandbox runs in-process)'],
  ENV.apiKey,
  ENV.apiKeyHeader,
  ENV.apiKeyScheme,
  ENV.insecure,
  [ENV.customerId[0], 'the customer id of the in-process sandbox, without DENTAL_ELIG_BASE_URL (or customerId in the config file; the service itself takes none from serve)'],
  [ENV.fhirUrl[0], "the chart's FHIR base (without it, the embedded FHIR server answers at /fhir)"],
  ENV.fhirToken,
  ENV.fhirClientId,
  ENV.fhirKeyFile,
  ['DENTAL_ELIG_WEBHOOK_SECRET', 'the Standard Webhooks secret, whsec_…'],
  ['DENTAL_ELIG_WEBHOOK_PREVIOUS_SECRET', 'while the secret is rotated, the one it replaces (deliveries signed with either are taken)'],
  ['DENTAL_ELIG_WEBHOOK_TOKEN', 'the webhooks\' bearer token, with "webhookScheme": "bearer"'],
  ['DENTAL_ELIG_NOTIFICATION_TOKEN', "the bearer token FHIR notifications must carry (the Subscription's channel.header)"],
  ['DENTAL_ELIG_PORTAL_CREDENTIALS_FILE', 'portal credentials sent inline: { "portalId": { "username", "password" } }'],
  ENV.dataDir,
  ENV.store,
  ['DENTAL_ELIG_LOG_LEVEL', 'fatal, error, warn, info (default), debug, trace or silent'],
  ENV.mappings,
  ENV.fhirSystemBase,
  ENV.fhirExtensionBase,
  ENV.config,
];
