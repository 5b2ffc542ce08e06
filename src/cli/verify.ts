import { Option, type Command } from 'commander';
import { describeIssue } from '../domain/issues';
import type { VerificationOutcome } from '../verification/outcome';
import { VerificationRequest } from '../verification/wire';
import { CliError, parseJsonInput, readInput, whole, type CliIo } from './io';
import { withService } from './service-context';
import { printRecord } from './table';

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
        maximums: data?.maximums?.length,
        coinsurance: data?.coinsurance?.length,
        participation: verificationProvider?.participation?.status,
        gaps: contexts?.map((c) => c.detail),
      };
    }
    case 'failed':
      return { ...base, failure: outcome.failure.kind, action: outcome.failure.action, title: outcome.problem.title, detail: outcome.problem.detail };
    case 'pending':
      return base;
    case 'unknown':
      return { ...base, note: 'status not known to this client; kept as is' };
  }
}

export function registerVerify(program: Command, io: CliIo): void {
  program
    .command('verify <request>')
    .description('Send one verification request (a JSON body as `convert --as request` prints; `-` for stdin)')
    .option('--async', 'queue it; the result comes by webhook (or --wait polls for it)')
    .option('--wait', 'with --async: poll until the result is in')
    .addOption(new Option('--first-delay-ms <ms>', 'with --wait: delay before the first poll').argParser(whole('--first-delay-ms')).default(3000).hideHelp())
    .option('--timeout-ms <ms>', 'with --wait: give up waiting after this long', whole('--timeout-ms'), 5 * 60_000)
    .option('--json', 'print the whole verification as JSON')
    .action(async (file: string, opts: { async?: boolean; wait?: boolean; firstDelayMs: number; timeoutMs: number; json?: boolean }, cmd: Command) => {
      const parsed = VerificationRequest.safeParse(parseJsonInput(await readInput(io, file), file));
      if (!parsed.success) {
        throw new CliError(`${file === '-' ? 'stdin' : file}: ${describeIssue(parsed.error, '(body)')}`);
      }
      await withService(io, cmd, async (client) => {
        let outcome: VerificationOutcome;
        if (opts.async) {
          const accepted = await client.requestVerification(parsed.data);
          if (!opts.wait) return printRecord(io, accepted, Boolean(opts.json));
          io.stderr.write(`queued ${accepted.correlationId}; polling`);
          outcome = await client.waitForVerification(accepted.correlationId, {
            firstDelayMs: opts.firstDelayMs,
            timeoutMs: opts.timeoutMs,
            onPoll: (status) => io.stderr.write(` ${status}`),
          });
          io.stderr.write('\n');
        } else {
          outcome = await client.verify(parsed.data);
        }
        for (const w of outcome.warnings) io.stderr.write(`dental-elig: warning: ${w}\n`);
        printRecord(io, opts.json ? outcome.verification : summarise(outcome), Boolean(opts.json));
        if (outcome.kind === 'pending') throw new CliError(`verification ${outcome.verification.correlationId}: still Pending after ${opts.timeoutMs} ms`);
        if (outcome.kind === 'failed') throw new CliError(`verification ${outcome.verification.correlationId}: Failed (${outcome.failure.kind}, ${outcome.failure.action})`);
      });
    });
}
