import type { Command } from 'commander';
import { describeIssue } from '../domain/issues';
import type { VerificationClient } from '../verification/client';
import { ServiceError } from '../verification/errors';
import type { VerificationOutcome } from '../verification/outcome';
import { findJsonSyntaxProblem } from '../verification/json-syntax';
import { entries, VerificationRequest } from '../verification/wire';
import { CliError, inputName, parseJsonInput, progressLine, readInput, say, waitOptions, type CliIo } from './io';
import { readsEnvironment, SERVICE_ENV, toCliError, withService } from './service-context';
import { printRecord } from './table';

const counted = (n: number | undefined, one: string, many: string) => (n === undefined ? undefined : `${n} ${n === 1 ? one : many}`);
/** How many entries a list of the result holds, its nulls left out. */
const listed = (list: ReadonlyArray<unknown> | null | undefined) => (list == null ? undefined : entries(list, () => 1).length);
/** The entries that say something, or nothing when none does: an empty list is no line of its own. */
const named = (texts: Array<string | null | undefined> | undefined) => {
  const said = (texts ?? []).filter((t): t is string => Boolean(t));
  return said.length ? said : undefined;
};

/** What a person wants to see of an outcome first; --json gives all of it. */
export function summarise(outcome: VerificationOutcome): Record<string, unknown> {
  const v = outcome.verification;
  const base = { correlationId: v.correlationId, externalId: v.externalId, status: v.status };
  switch (outcome.kind) {
    case 'completed':
    case 'partial': {
      const { plan, data, contexts, verificationProvider } = outcome.result;
      return {
        ...base,
        plan: plan?.name,
        planStatus: plan?.status,
        payer: plan?.payer?.name,
        // Counts, not money: the amounts and percentages are in --json.
        maximums: counted(listed(data?.maximums), 'entry (amounts: --json)', 'entries (amounts: --json)'),
        coinsurance: counted(listed(data?.coinsurance), 'category (percentages: --json)', 'categories (percentages: --json)'),
        participation: verificationProvider?.participation?.status,
        gaps: named(entries(contexts, (c) => c.detail ?? c.dataPoint ?? c.portalId)),
      };
    }
    case 'failed': {
      const { problem, failure } = outcome;
      // Each source's own failure: the detail may only say that one or more failed.
      const upstream = named(problem.upstreamErrors?.map((u) => (u.portalId && u.detail ? `${u.portalId}: ${u.detail}` : (u.detail ?? u.portalId))));
      return { ...base, failure: failure.kind, action: failure.action, title: problem.title, detail: problem.detail, upstream };
    }
    case 'pending':
      return base;
    case 'unknown':
      return { ...base, note: 'status not known to this client; kept as is' };
  }
}

/**
 * The bodies of a request file: one JSON object, an array of them (what `convert … --as request`
 * prints), or JSON lines (one object a line). Each comes with the name errors use for it.
 */
export function readBodies(text: string, file: string): Array<{ name: string; body: unknown }> {
  const name = inputName(file);
  const lines = text
    .split('\n')
    .map((line, index) => ({ line, number: index + 1 }))
    .filter(({ line }) => line.trim() !== '');
  const first = lines[0]?.line ?? '';
  if (lines.length > 1 && findJsonSyntaxProblem(text) !== undefined && findJsonSyntaxProblem(first) === undefined) {
    return lines.map(({ line, number }) => {
      const problem = findJsonSyntaxProblem(line);
      if (problem) throw new CliError(`${name}: not valid JSON at line ${number}, column ${problem.column}: ${problem.problem}`);
      return { name: `${name} line ${number}`, body: JSON.parse(line) as unknown };
    });
  }
  const value = parseJsonInput(text, file);
  if (!Array.isArray(value)) return [{ name, body: value }];
  if (value.length === 0) throw new CliError(`${name}: an empty array holds no request`);
  return value.map((body: unknown, i) => ({ name: `${name} [${i}]`, body }));
}

interface SendOptions {
  async?: boolean;
  wait?: boolean;
  firstDelayMs: number;
  timeoutMs: number;
  json?: boolean;
}

export function registerVerify(program: Command, io: CliIo): void {
  const verify = program
    .command('verify')
    .description('Verify insurance: send requests (`verify FILE`), or fetch a verification by its correlationId (`verify get ID`)');

  readsEnvironment(
    waitOptions(
      verify
        .command('send <request>', { isDefault: true })
        .description(
          'Send verification requests: one JSON body, an array of them (as `convert … --as request` prints) or JSON lines; `-` for stdin. ' +
            'Each is verified in turn. `dental-elig verify FILE` means `verify send FILE`.',
        )
        .option('--async', 'queue each; the result comes by webhook, `verify get ID` fetches it, or --wait polls for it')
        .option('--wait', 'with --async: poll until the result is in'),
      3000,
    )
      .option('--json', 'print each whole verification as JSON (an array for several)'),
    SERVICE_ENV,
  ).action(async (file: string, opts: SendOptions, cmd: Command) => {
    if (opts.wait && !opts.async) throw new CliError('--wait: goes with --async; a synchronous verification answers with its outcome', 2);
    const bodies = readBodies(await readInput(io, file), file);
    const requests = bodies.map(({ name, body }) => {
      const parsed = VerificationRequest.safeParse(body);
      if (!parsed.success) throw new CliError(`${name}: ${describeIssue(parsed.error, '(body)')}`);
      return parsed.data;
    });
    await withService(io, cmd, async (client) => {
      const shown: unknown[] = [];
      const problems: string[] = [];
      let queued: unknown;
      for (const [index, request] of requests.entries()) {
        if (!opts.json && index > 0) io.stdout.write('\n');
        try {
          if (opts.async && !opts.wait) {
            const accepted = await client.requestVerification(request);
            shown.push(accepted);
            if (!opts.json) printRecord(io, accepted, false);
            continue;
          }
          let outcome: VerificationOutcome;
          if (opts.async) {
            const accepted = await client.requestVerification(request);
            // Queued: should its polling fail, --json still holds it, as --async alone would have printed it.
            queued = accepted;
            // Polled with the externalId it was sent under: a body naming another is another request's, refused as the worker refuses it.
            outcome = await waitForQueued(io, client, accepted.correlationId, { ...opts, externalId: request.externalId });
            queued = undefined;
          } else outcome = await client.verify(request);
          const problem = report(io, outcome, opts);
          shown.push(outcome.verification);
          if (problem) problems.push(problem);
        } catch (err) {
          if (queued) shown.push(queued);
          if (!(err instanceof ServiceError || err instanceof CliError) || requests.length === 1) {
            // One body is no batch, but its verification goes on at the service all the same: a script reads its id here too.
            if (opts.json && queued) printRecord(io, queued as Record<string, unknown>, true);
            throw err;
          }
          // The bodies before this one were sent: a script still gets what they did (their correlationIds), and the line names where it stopped.
          if (opts.json) printRecord(io, shown as unknown as Record<string, unknown>, true);
          for (const p of problems) say(io, p);
          const notSent = requests.length - index - 1;
          throw new CliError(`${bodies[index]?.name}: ${(err instanceof ServiceError ? toCliError(err) : err).message}${notSent ? `; ${notSent} after it not sent` : ''}`);
        }
      }
      if (opts.json) printRecord(io, (shown.length === 1 ? shown[0] : shown) as Record<string, unknown>, true);
      else if (opts.async && !opts.wait) {
        // One verification names its own id; several, each printed above.
        const id = requests.length === 1 ? (shown[0] as { correlationId: string }).correlationId : 'CORRELATION_ID';
        io.stdout.write(`next: \`dental-elig verify get ${id}\` fetches a result (or --wait polls for it)\n`);
      }
      fail(io, problems, requests.length);
    });
  });

  readsEnvironment(
    waitOptions(
      verify
        .command('get <correlationId>')
        .description('Fetch a verification by the correlationId `verify --async` printed; Pending means ask again later, or --wait')
        .option('--wait', 'poll until it is no longer Pending'),
      0,
    )
      .option('--json', 'print the whole verification as JSON'),
    SERVICE_ENV,
  ).action(async (correlationId: string, opts: Omit<SendOptions, 'async'>, cmd: Command) =>
    withService(io, cmd, async (client) => {
      const outcome = opts.wait ? await waitFor(io, client, correlationId, opts) : await client.getVerification(correlationId);
      const problem = report(io, outcome, { ...opts, wait: Boolean(opts.wait) });
      if (opts.json) printRecord(io, outcome.verification, true);
      fail(io, problem ? [problem] : [], 1);
    }),
  );
}

async function waitFor(io: CliIo, client: VerificationClient, correlationId: string, opts: { firstDelayMs: number; timeoutMs: number; externalId?: string | undefined }): Promise<VerificationOutcome> {
  return progressLine(io, `queued ${correlationId}; polling`, (add) =>
    client.waitForVerification(correlationId, { firstDelayMs: opts.firstDelayMs, timeoutMs: opts.timeoutMs, onPoll: add, ...(opts.externalId !== undefined && { externalId: opts.externalId }) }),
  );
}

/** Waits for a verification this command queued: a poll that fails names it, as it goes on at the service and only its id finds it. */
async function waitForQueued(io: CliIo, client: VerificationClient, correlationId: string, opts: { firstDelayMs: number; timeoutMs: number; externalId?: string | undefined }): Promise<VerificationOutcome> {
  try {
    return await waitFor(io, client, correlationId, opts);
  } catch (err) {
    if (!(err instanceof ServiceError)) throw err;
    throw new CliError(`verification ${correlationId} queued, but ${toCliError(err).message}; \`dental-elig verify get ${correlationId} --wait\` asks for it again`);
  }
}

/** Prints an outcome (unless --json gathers them) and says what keeps it from being an answer. */
function report(io: CliIo, outcome: VerificationOutcome, opts: { json?: boolean; wait?: boolean; timeoutMs: number }): string | undefined {
  for (const w of outcome.warnings) say(io, `warning: ${w}`);
  if (!opts.json) printRecord(io, summarise(outcome), false);
  const id = outcome.verification.correlationId;
  if (outcome.kind === 'pending' && opts.wait) return `verification ${id}: still Pending after ${opts.timeoutMs} ms`;
  if (outcome.kind === 'failed') return `verification ${id}: Failed (${outcome.failure.kind}, ${outcome.failure.action})`;
  return undefined;
}

/** One body: its problem is the error line. Several: each problem on stderr, then a count. */
function fail(io: CliIo, problems: string[], total: number): void {
  if (problems.length === 0) return;
  if (total === 1) throw new CliError(problems[0] as string);
  for (const p of problems) say(io, p);
  throw new CliError(`${problems.length} of ${total} verifications did not complete`);
}
