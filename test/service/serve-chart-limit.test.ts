import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../src/mapping-files';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { startScriptedServer, streamLarge } from '../support/http-server';
import { bin, startServe, type Serve } from '../support/serve-process';
import { chartOf } from '../sync/harness';

/**
 * A chart answering a FHIR notification's read with more than this plugin reads, to the built
 * `dental-elig serve` as its own process: in Jest's VM, fetch keeps no cause for a failure undici
 * raised in the test's realm, so what the refusal reads as shows only in a process of its own.
 */
describe('dental-elig serve, a chart answering a read larger than it reads', () => {
  let sandbox: Sandbox;
  let fhir: FhirServer;
  let chart: Awaited<ReturnType<typeof startScriptedServer>>;
  let dataDir: string;
  let running: Serve | undefined;

  beforeAll(async () => {
    sandbox = await startSandbox({ seed: true });
    fhir = await startFhirServer({ validate: true });
    await fhir.seed(chartOf('primary-secondary'));
    // The chart as the sync sees it: the FHIR server, but for one appointment it answers with 33 MB.
    chart = await startScriptedServer(async (req, res) => {
      if (req.url === '/Appointment/appt-huge') return streamLarge(res, 33, { declared: false });
      const upstream = await fetch(`${fhir.url}${req.url}`, { method: req.method, headers: { accept: 'application/fhir+json', 'content-type': 'application/fhir+json' }, body: req.method === 'GET' ? undefined : req.body });
      res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end(await upstream.text());
    });
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-serve-'));
    writeFileSync(path.join(dataDir, 'config.json'), JSON.stringify({ logLevel: 'warn' }));
  });
  afterAll(async () => {
    running?.child.kill('SIGKILL');
    await sandbox.close();
    await fhir.close();
    await chart.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('keeps the notification as a dead letter saying why, answers 422 so it is not sent again, and handles the appointment beside it', async () => {
    running = await startServe(dataDir, { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_FHIR_URL: chart.url, DENTAL_ELIG_WEBHOOK_SECRET: generateWebhookSecret() });
    const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${chart.url}/Appointment/appt-huge` }, { fullUrl: `${chart.url}/Appointment/appt-4004` }] });
    const res = await fetch(`http://127.0.0.1:${running.httpPort}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body });
    const tooLarge = "Appointment/appt-huge: Appointment: the FHIR server's answer to the read is larger than this plugin reads; not read";
    expect([res.status, ((await res.json()) as { issue: { diagnostics: string }[] }).issue[0]?.diagnostics]).toEqual([422, `${tooLarge}; Appointment/appt-4004: booked`]);
    const { stdout } = await promisify(execFile)(process.execPath, [bin, 'jobs', 'messages', '--dead', '--json', '--data-dir', dataDir], { cwd: projectRoot });
    expect((JSON.parse(stdout) as Array<{ kind: string; detail: string }>).map((m) => [m.kind, m.detail])).toEqual([['fhir-notification', tooLarge]]);
  });
});
