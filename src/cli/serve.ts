import type { Command } from 'commander';
import { ConfigError, withoutUndefined } from '../service/config-file';
import { keepHeapNearLive } from '../service/heap-growth';
import { loadServeConfig } from '../service/serve-config';
import { serve } from '../service/serve';
import { CliError, port, type CliIo } from './io';
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
  program
    .command('serve')
    .description(
      'Run the sync service: HL7 v2 over MLLP, the verification webhook, FHIR notifications, /healthz and /metrics.\n' +
        'Reads DENTAL_ELIG_BASE_URL, DENTAL_ELIG_API_KEY, DENTAL_ELIG_CUSTOMER_ID (the service; without a base URL the sandbox runs in-process),\n' +
        'DENTAL_ELIG_FHIR_URL and DENTAL_ELIG_FHIR_TOKEN (the chart; without a URL the embedded FHIR server answers at /fhir),\n' +
        'DENTAL_ELIG_WEBHOOK_SECRET (or DENTAL_ELIG_WEBHOOK_TOKEN with webhookScheme bearer), DENTAL_ELIG_DATA_DIR, DENTAL_ELIG_STORE, DENTAL_ELIG_LOG_LEVEL',
    )
    .option('--data-dir <dir>', 'where the job store and the payer catalog live (default .dental-elig/data)')
    .option('--store <location>', 'the job store: a SQLite file (default: in the data dir) or postgres://user@host/db shared by several instances (password from PGPASSWORD or DENTAL_ELIG_STORE)')
    .option('--mllp-port <n>', 'MLLP port (0: any free port; default 2575)', port('--mllp-port'))
    .option('--http-port <n>', 'HTTP port (0: any free port; default 8090)', port('--http-port'))
    .action(async (opts: ServeOpts, command: Command) => {
      let config;
      try {
        config = loadServeConfig(io.env, {
          ...withoutUndefined({ configFile: command.optsWithGlobals<{ config?: string }>().config, dataDir: opts.dataDir, store: opts.store, mllpPort: opts.mllpPort, httpPort: opts.httpPort }),
        });
      } catch (err) {
        if (err instanceof ConfigError) throw new CliError(err.message, 2);
        throw err;
      }
      // A process-wide setting: the sidecar owns its process, an application that embeds the library does not.
      keepHeapNearLive();
      let serving;
      try {
        serving = await serve(config, { line: (text) => io.stdout.write(`${text}\n`) });
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EADDRINUSE' || code === 'EACCES') throw new CliError(`serve: cannot listen (${code}); choose other ports with --mllp-port and --http-port`);
        throw new CliError(`serve: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
      }
      await stopped(io.signal);
      await serving.close();
      io.stdout.write('stopped\n');
    });
}
