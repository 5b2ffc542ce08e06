import type { CoverageEligibilityResponse } from 'fhir/r4';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { createEligibilitySync, type EligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { VerificationClient } from '../../src/verification/client';
import type { VerificationRequest } from '../../src/verification/wire';
import { json, startScriptedServer } from '../support/http-server';
import { chartOf, searchFhir, until } from './harness';

/** A client that keeps what it sent, to see the request the worker built. */
class RecordingClient extends VerificationClient {
  readonly sent: VerificationRequest[] = [];
  override verify(body: VerificationRequest) {
    this.sent.push(body);
    return super.verify(body);
  }
}

/**
 * The sandbox, a chart holding the `self` fixture and a sync sending `password` inline for Delta
 * Dental's portal; `service` is what the sync talks to, given the sandbox. Notifies appointment
 * appt-1001 and runs `check` once the sync has done with it.
 */
async function withInlineSync(
  password: string,
  service: (sandbox: Sandbox) => Promise<{ config: ConstructorParameters<typeof VerificationClient>[0] | VerificationClient; close(): Promise<void> }>,
  check: (sync: EligibilitySync, fhir: FhirServer) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-inline-'));
  const sandbox = await startSandbox({ seed: true });
  const fhir = await startFhirServer({ validate: true });
  const used = await service(sandbox);
  const sync = createEligibilitySync({
    dataDir: dir,
    service: used.config,
    fhir: { baseUrl: fhir.url },
    inlineCredentials: { deltadentalins: { username: 'front-desk', password } },
    settings: { idleMs: 50 },
    logger: createLogger({ level: 'silent' }),
  });
  try {
    await sync.start();
    await fhir.seed(chartOf('self'));
    await sync.notifyAppointment('appt-1001');
    await check(sync, fhir);
  } finally {
    await sync.stop();
    await used.close();
    await sandbox.close();
    await fhir.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

it('sends configured inline credentials for their portal instead of naming stored ones', async () => {
  let client: RecordingClient | undefined;
  const recording = async (sandbox: Sandbox) => {
    client = new RecordingClient({ baseUrl: sandbox.url, apiKey: sandbox.apiKey });
    return { config: client, close: () => client?.close() ?? Promise.resolve() };
  };
  await withInlineSync('portal-secret', recording, async (sync) => {
    await until('written', async () => (await sync.store.listChecks({ states: ['written'] })).length === 1);
    expect(client?.sent).toHaveLength(1);
    expect(client?.sent[0]).toMatchObject({ portalId: 'deltadentalins', credentials: { username: 'front-desk', password: 'portal-secret' } });
  });
});

it('writes a Failed result that quotes the inline password with the password cut out, in the chart and in the store', async () => {
  const password = 'expired-portal-secret';
  // The service in front of the sandbox quotes the login the portal refused, as some portals' messages do.
  const quoting = async (sandbox: Sandbox) => {
    const hop = await startScriptedServer(async (req, res) => {
      const upstream = await fetch(`${sandbox.url}${req.url}`, { method: req.method, headers: { authorization: String(req.headers.authorization), 'content-type': 'application/json' }, ...(req.body && { body: req.body }) });
      const answer = (await upstream.json()) as { status?: string; result?: { detail?: string } };
      if (answer.status === 'Failed' && answer.result) answer.result.detail = `the portal refused front-desk/${password}`;
      json(res, upstream.status, answer);
    });
    return { config: { baseUrl: hop.url, apiKey: sandbox.apiKey }, close: () => hop.close() };
  };
  await withInlineSync(password, quoting, async (sync, fhir) => {
    const [check] = await until('the refusal for a person', async () => {
      const held = await sync.store.listChecks({ states: ['needs-attention'] });
      return held.length === 1 && held;
    });
    const [response] = (await searchFhir(fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(response?.outcome).toBe('error');
    expect(JSON.stringify(response)).toContain('the portal refused front-desk/[redacted]');
    expect(JSON.stringify(response)).not.toContain(password);
    expect(JSON.stringify(check)).not.toContain(password);
  });
});
