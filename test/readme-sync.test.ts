import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { Server } from 'node:http';
import { projectRoot } from '../src/mapping-files';
import { generateWebhookSecret, startSandbox } from '../src/sandbox';
import { startFhirServer } from '../src/sandbox/fhir-server';
import { frame } from '../src/service/mllp-framing';
import { segment } from './adapters/hl7/segment';
import { client } from './service/mllp-client';
import { searchFhir, until } from './sync/harness';

/** README's embedding example, as written, against the sandbox and a FHIR server: a booking over MLLP ends in the chart. */
it('runs the README embedding example as written', async () => {
  const readme = readFileSync(path.join(projectRoot, 'README.md'), 'utf8');
  const example = /<!-- example: embed -->\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(example).toBeDefined();
  expect((example ?? '').trim().split('\n').length).toBeLessThanOrEqual(30);
  const dir = mkdtempSync(path.join(tmpdir(), 'readme-embed-'));
  const sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 200 } });
  const fhir = await startFhirServer({ validate: true });
  const secret = generateWebhookSecret();
  Object.assign(process.env, { ELIG_DATA_DIR: dir, DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_FHIR_URL: fhir.url, DENTAL_ELIG_WEBHOOK_SECRET: secret });
  const printed: string[] = [];
  const log = jest.spyOn(console, 'log').mockImplementation((line: string) => void printed.push(line));
  const file = path.join(dir, 'sync.ts');
  writeFileSync(file, example ?? '');
  const embedded = require(file) as { start(): Promise<{ port: number }>; stop(): Promise<void>; http: Server };
  try {
    const { port } = await embedded.start();
    sandbox.configureWebhook({ url: `http://127.0.0.1:${(embedded.http.address() as AddressInfo).port}/webhooks/insurance-verification`, secret });
    const sender = await client(port);
    sender.socket.write(
      frame(
        [
          'MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|E1|P|2.5.1',
          'SCH|APT-E1^SC||||||||||^^^20261210093000',
          'PID|1||P-E1^^^SC^MR||DOE^JANE||19800102|F',
          segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna Dental', 17: 'SEL', 36: 'SBX-COMPLETE' }),
        ].join('\r'),
      ),
    );
    expect((await sender.waitFor(1))[0]).toContain('MSA|AA|E1');
    sender.socket.end();
    await until('the example to print the written check', async () => printed.length > 0);
    expect(printed[0]).toMatch(/^eligibility written for elig_[0-9a-f]+: completed$/);
    expect(await searchFhir(fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
  } finally {
    await embedded.stop();
    log.mockRestore();
    await sandbox.close();
    await fhir.close();
    for (const name of ['ELIG_DATA_DIR', 'DENTAL_ELIG_BASE_URL', 'DENTAL_ELIG_API_KEY', 'DENTAL_ELIG_FHIR_URL', 'DENTAL_ELIG_WEBHOOK_SECRET']) delete process.env[name];
    rmSync(dir, { recursive: true, force: true });
  }
});
