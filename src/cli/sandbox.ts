import type { Command } from 'commander';
import { checkWebhookConfig, DEFAULT_API_KEY, DEFAULT_CUSTOMER_ID, DEMO_PRACTICE, SCENARIOS, startSandbox, type WebhookConfig } from '../sandbox';
import { notAWebhookSecret } from '../verification/webhook';
import { CliError, port, whole, type CliIo } from './io';
import { stopped } from './stopped';

interface SandboxOpts {
  port: number;
  host: string;
  apiKey?: string;
  customerId: string;
  webhookUrl?: string;
  seed: boolean;
  asyncDelayMs?: number;
  latencyMs?: number;
  latencyJitterMs?: number;
  throttleVerifications?: number;
}

/** The paths a verification is sent to, synchronous and asynchronous: a rate limit of the sends alone leaves the reads answered. */
const VERIFICATION_SENDS = /^\/v2\/insurance-verification(s|-requests)$/;

/**
 * `dental-elig sandbox`: the embedded sandbox, standalone, until Ctrl-C. The webhook secret and
 * bearer token come from the environment only. The API key is the sandbox's own, made up by the
 * person running it (the service's real keys never go here), so --api-key is allowed.
 */
export function registerSandbox(program: Command, io: CliIo): void {
  program
    .command('sandbox')
    .description('Run the embedded sandbox of the verification service (in memory, loopback only unless --host says otherwise)')
    .option('--port <n>', 'port to listen on (0: any free port)', port('--port'), 0)
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--api-key <key>', `the sandbox's API key (or DENTAL_ELIG_SANDBOX_API_KEY; default ${DEFAULT_API_KEY})`)
    .option('--customer-id <id>', 'the customer the key belongs to', DEFAULT_CUSTOMER_ID)
    .option('--webhook-url <url>', 'where asynchronous results are POSTed (secret from DENTAL_ELIG_SANDBOX_WEBHOOK_SECRET, token from DENTAL_ELIG_SANDBOX_WEBHOOK_TOKEN)')
    .option('--no-seed', 'start empty, without the demo practice')
    .option('--async-delay-ms <ms>', 'how long an asynchronous verification takes', whole('--async-delay-ms'))
    .option('--latency-ms <ms>', 'added to every request, as a remote service\'s round trip', whole('--latency-ms'))
    .option('--latency-jitter-ms <ms>', 'the added latency varies by up to this much either way, uniformly', whole('--latency-jitter-ms'))
    .option('--throttle-verifications <ms>', 'answer every verification sent 429 (no Retry-After) for this long after start, the reads as usual', whole('--throttle-verifications'))
    .action(async (opts: SandboxOpts) => {
      const apiKey = opts.apiKey ?? io.env.DENTAL_ELIG_SANDBOX_API_KEY ?? DEFAULT_API_KEY;
      let webhook: WebhookConfig | undefined;
      if (opts.webhookUrl) {
        if (!/^https?:\/\//.test(opts.webhookUrl)) throw new CliError('--webhook-url: must be an http or https URL', 2);
        webhook = {
          url: opts.webhookUrl,
          secret: io.env.DENTAL_ELIG_SANDBOX_WEBHOOK_SECRET,
          bearerToken: io.env.DENTAL_ELIG_SANDBOX_WEBHOOK_TOKEN,
        };
      }
      try {
        checkWebhookConfig(webhook);
      } catch {
        throw new CliError(notAWebhookSecret('DENTAL_ELIG_SANDBOX_WEBHOOK_SECRET'), 2);
      }
      let sandbox;
      try {
        sandbox = await startSandbox({
          port: opts.port,
          host: opts.host,
          apiKey,
          customerId: opts.customerId,
          webhook,
          seed: opts.seed,
          timing: {
            ...(opts.asyncDelayMs !== undefined && { asyncCompletionMs: opts.asyncDelayMs }),
            ...(opts.latencyMs !== undefined && { latencyMs: opts.latencyMs }),
            ...(opts.latencyJitterMs !== undefined && { latencyJitterMs: opts.latencyJitterMs }),
          },
        });
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new CliError(`sandbox: cannot listen on ${opts.host}:${opts.port} (${code ?? (err as Error).message})`);
      }
      const out = (line: string) => io.stdout.write(`${line}\n`);
      let throttled: NodeJS.Timeout | undefined;
      if (opts.throttleVerifications) {
        sandbox.injectFault({ method: 'POST', path: VERIFICATION_SENDS, status: 429, times: Infinity });
        const open = sandbox;
        throttled = setTimeout(() => (open.clearFaults(), out('throttle:  over, verifications taken again')), opts.throttleVerifications);
      }
      out(`listening: sandbox ${sandbox.url}`);
      out(`customer:  ${sandbox.customerId}`);
      out(`api key:   ${apiKey === DEFAULT_API_KEY ? DEFAULT_API_KEY : '(the one given)'}`);
      if (opts.seed) {
        out(`practice:  ${DEMO_PRACTICE.organizationId} with ${DEMO_PRACTICE.clinics.map((c) => c.clinicId).join(', ')} (credentials stored on every portal)`);
      }
      out(`webhook:   ${webhook ? `${webhook.url} (${webhook.secret ? 'signed' : 'unsigned'}${webhook.bearerToken ? ', bearer token' : ''})` : 'none (asynchronous results can be polled)'}`);
      out(`scenarios: member ids ${SCENARIOS.slice(0, 4).map((s) => s.memberId).join(', ')}, SBX-FAIL-<kind>, … (README lists them)`);
      out(`use it:    DENTAL_ELIG_BASE_URL=${sandbox.url} DENTAL_ELIG_API_KEY=… DENTAL_ELIG_CUSTOMER_ID=${sandbox.customerId}`);
      if (throttled) out(`throttle:  every verification sent answered 429 for ${opts.throttleVerifications} ms`);
      await stopped(io.signal);
      clearTimeout(throttled);
      await sandbox.close();
      out('sandbox stopped');
    });
}
