import type { Command } from 'commander';
import * as z from 'zod';
import { loadClinicRouting } from '../adapters/clinic-routing';
import { convertBundle, convertFromServer, type FhirConversion, type FhirInputOptions } from '../adapters/fhir/in';
import { CHART_TRAFFIC, carriesCredentials, isHttpUrl, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';
import { envFlag } from '../service/config-file';
import { fhirKitReader } from '../sync/fhir-reader';
import { networkCode } from '../sync/chart-errors';
import { describeFhirIssue, FhirInputError } from '../adapters/fhir/operation-outcome';
import { toCoverageEligibilityResponse } from '../adapters/fhir/out';
import { assertValidR4 } from '../adapters/fhir/validate';
import { describeIssue, type EligibilityCheck } from '../domain';
import { toOutcome } from '../verification/outcome';
import { describeTransportError } from '../verification/http';
import { asRequest, shapeOf } from './as-request';
import { ENV, readsEnvironment } from './service-context';
import { CliError, inputName, instant, loadCatalog, parseJsonInput, readInput, say, writeJson, type CliIo } from './io';

interface ConvertFhirOptions {
  as: string;
  portal?: string;
  appointment?: string;
  server?: string;
  catalog?: string;
  receivedAt?: string;
}

interface ConvertResultOptions {
  patient: string;
  coverage: string;
  request?: string;
  insurer?: string;
  created?: string;
}

export function registerConvertFhir(convert: Command, io: CliIo): void {
  readsEnvironment(
  convert
    .command('fhir [bundle]')
    .description(
      'A FHIR R4 Bundle (`-` for stdin), or an appointment on a FHIR server (--server with --appointment), to the eligibility checks ' +
        'its patient\'s active coverages make, primary first, as one JSON array. A bearer token for the server comes from DENTAL_ELIG_FHIR_TOKEN; ' +
        'a plain http:// server other than this machine needs DENTAL_ELIG_ALLOW_INSECURE_HTTP=1.',
    )
    .option('--appointment <id>', 'the Appointment to verify: needed with --server, or when the Bundle holds several')
    .option('--server <url>', 'read the appointment, patient, coverages, payors and subscribers from this FHIR base URL')
    .option('--as <shape>', 'check (EligibilityCheck) or request (the v2 verification request body `verify` takes)', 'check')
    .option('--catalog <file>', 'a saved payer catalog (setup payers sync): resolves each payer and its portal')
    .option('--portal <id>', 'with --as request: the portal to verify on, for payers the catalog does not settle')
    .option('--received-at <instant>', 'the receipt time written into each check (default now), for reproducible output', instant('--received-at'))
    .action(async (file: string | undefined, opts: ConvertFhirOptions) => {
      const shape = shapeOf(opts.as);
      const receivedAt = opts.receivedAt ?? new Date().toISOString();
      if ((file === undefined) === (opts.server === undefined)) throw new CliError('give either a Bundle file or --server', 2);
      const options: FhirInputOptions = { routing: loadClinicRouting(), receivedAt, resolver: opts.catalog ? await loadCatalog(io, opts.catalog) : undefined };
      const checks = file !== undefined ? await fromBundle(io, file, { ...options, appointmentId: opts.appointment }) : await fromServer(io, opts, options);
      writeJson(io, shape === 'request' ? checks.map((c) => asRequest(c, opts.portal)) : checks);
    }),
    [ENV.fhirToken, [ENV.insecure[0], '1, true or yes allows a plain http:// --server for a host other than this machine'], ENV.mappings],
  );

  readsEnvironment(
  convert
    .command('result <file>')
    .description(
      'A verification result (the InsuranceVerificationV3 body, `-` for stdin) to the CoverageEligibilityResponse written into the chart, ' +
        'validated against FHIR R4 before it is printed.',
    )
    .requiredOption('--patient <reference>', 'the chart\'s Patient/<id>')
    .requiredOption('--coverage <reference>', 'the chart\'s Coverage/<id>')
    .option('--request <reference>', 'the CoverageEligibilityRequest/<id> answered (default: a logical reference by correlationId)')
    .option('--insurer <reference>', 'the payer\'s Organization/<id> (default: a logical reference by the payer the result names)')
    .option('--created <instant>', 'CoverageEligibilityResponse.created (default now), for reproducible output')
    .action(async (file: string, opts: ConvertResultOptions) => {
      const body = parseJsonInput(await readInput(io, file), file);
      const outcome = fhirInput(() => {
        try {
          return toOutcome(body);
        } catch (err) {
          if (!(err instanceof z.ZodError)) throw err;
          throw new CliError(`${inputName(file)}: ${describeIssue(err, '(body)')}`);
        }
      });
      const response = fhirInput(() =>
        toCoverageEligibilityResponse(outcome, { patient: opts.patient, coverage: opts.coverage, request: opts.request, insurer: opts.insurer }, { created: opts.created }),
      );
      try {
        assertValidR4(response);
      } catch (err) {
        // Not the input's fault: the writer made something FHIR R4 refuses.
        if (err instanceof FhirInputError) throw new CliError(`internal error: the response fails R4 validation: ${err.message}`);
        throw err;
      }
      writeJson(io, response);
    }),
    [ENV.mappings, ENV.fhirSystemBase, ENV.fhirExtensionBase],
  );
}

async function fromBundle(io: CliIo, file: string, options: FhirInputOptions): Promise<EligibilityCheck[]> {
  const bundle = parseJsonInput(await readInput(io, file), file);
  return noted(io, fhirInput(() => convertBundle(bundle, options)));
}

async function fromServer(io: CliIo, opts: ConvertFhirOptions, options: FhirInputOptions): Promise<EligibilityCheck[]> {
  if (!opts.appointment) throw new CliError('--server needs --appointment', 2);
  const server = opts.server ?? '';
  if (!isHttpUrl(server)) throw new CliError('--server: must be an http(s) URL', 2);
  if (carriesCredentials(server)) throw new CliError('--server: credentials do not belong in the URL; the bearer token comes from DENTAL_ELIG_FHIR_TOKEN', 2);
  const allowInsecureHttp = envFlag(io.env, 'DENTAL_ELIG_ALLOW_INSECURE_HTTP') ?? false;
  if (isPlainHttpAcrossNetwork(server) && !allowInsecureHttp) {
    throw new CliError(`--server: ${plainHttpRefused(CHART_TRAFFIC, 'DENTAL_ELIG_ALLOW_INSECURE_HTTP=1')}`, 2);
  }
  const token = io.env.DENTAL_ELIG_FHIR_TOKEN;
  const reader = await fhirKitReader(server.replace(/\/+$/, ''), { allowInsecureHttp, ...(token && { bearerToken: token }) });
  try {
    return noted(io, await convertFromServer(reader, opts.appointment, options));
  } catch (err) {
    if (err instanceof FhirInputError) throw new CliError(everyIssue(err));
    // A network failure is named in a cause (fetch's, under the reader's words); the reader names an answer's status, never the URL.
    const code = networkCode(err);
    if (code) throw new CliError(`--server: ${describeTransportError(code)} at ${server} (${code})`);
    throw new CliError(`--server: ${err instanceof Error ? err.message.split('\n')[0] : 'request failed'}`);
  }
}

/**
 * The checks for stdout; what the conversion left out and why (a coverage not in force, an invalid
 * NPI) to stderr, a line each, and the appointment's status when it is one not verified, so that
 * an empty list says why it is empty.
 */
function noted(io: CliIo, { checks, notes, unverifiedStatus }: FhirConversion): EligibilityCheck[] {
  for (const note of notes) say(io, `${note.severity ?? 'warning'}: ${describeFhirIssue(note)}`);
  if (unverifiedStatus !== undefined) {
    say(io, `note: Appointment.status is ${unverifiedStatus.slice(0, 40)}: appointments in that status are not verified (mappings/fhir/appointment-status.json), so there are no checks`);
  }
  return checks;
}

/** FhirInputError names each element; the CLI prints every issue on its one line. */
function fhirInput<T>(run: () => T): T {
  try {
    return run();
  } catch (err) {
    if (err instanceof FhirInputError) throw new CliError(everyIssue(err));
    throw err;
  }
}

/** `Patient.birthDate: required; Coverage.subscriberId: required`: all of them, not the first and a count. */
function everyIssue(err: FhirInputError): string {
  const issues = err.outcome.issue.map((i) => `${i.expression?.[0] ?? '(input)'}: ${i.diagnostics ?? i.code}`);
  return issues.length > 1 ? `${issues.length} problems: ${issues.join('; ')}` : (issues[0] ?? err.message);
}
