import type { Command } from 'commander';
import type { Bundle, FhirResource } from 'fhir/r4';
import { FHIR_BASE_PATH, startFhirServer } from '../sandbox/fhir-server';
import { CliError, parseJsonInput, port, readInput, type CliIo } from './io';
import { stopped } from './stopped';

interface FhirServerOpts {
  port: number;
  host: string;
  seed?: string;
}

/**
 * `dental-elig fhir-server`: the embedded FHIR R4 server, standalone, until Ctrl-C; writes that
 * fail R4 validation are refused with 422 and an OperationOutcome. `--seed` puts a Bundle's
 * resources in the chart first, so `convert fhir --server` has an appointment to read.
 */
export function registerFhirServer(program: Command, io: CliIo): void {
  program
    .command('fhir-server')
    .description(`Run the embedded FHIR R4 server (in memory, base ${FHIR_BASE_PATH}, validating writes; loopback only unless --host says otherwise)`)
    .option('--port <n>', 'port to listen on (0: any free port)', port('--port'), 0)
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--seed <bundle>', "a FHIR Bundle whose resources the chart starts with, under their own ids (e.g. fixtures/fhir/primary-secondary.bundle.json)")
    .action(async (opts: FhirServerOpts) => {
      const resources = opts.seed ? await bundleResources(io, opts.seed) : [];
      let server;
      try {
        server = await startFhirServer({ validate: true, port: opts.port, host: opts.host });
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new CliError(`fhir-server: cannot listen on ${opts.host}:${opts.port} (${code ?? (err as Error).message})`);
      }
      await server.seed(resources);
      const out = (line: string) => io.stdout.write(`${line}\n`);
      out(`listening: fhir ${server.url}`);
      if (opts.seed) out(`chart:     ${resources.length} resources from ${opts.seed}`);
      await stopped(io.signal);
      await server.close();
      out('fhir server stopped');
    });
}

async function bundleResources(io: CliIo, file: string): Promise<FhirResource[]> {
  const bundle = parseJsonInput(await readInput(io, file), file) as Partial<Bundle>;
  if (bundle?.resourceType !== 'Bundle') throw new CliError(`${file}: resourceType: must be Bundle`);
  return (bundle.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : []));
}
