import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { startSandbox } from '../../src/sandbox';
import { startFhirServer } from '../../src/sandbox/fhir-server';
import { createEligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { VerificationClient } from '../../src/verification/client';
import type { VerificationRequest } from '../../src/verification/wire';
import { chartOf, until } from './harness';

/** A client that keeps what it sent, to see the request the worker built. */
class RecordingClient extends VerificationClient {
  readonly sent: VerificationRequest[] = [];
  override verify(body: VerificationRequest) {
    this.sent.push(body);
    return super.verify(body);
  }
}

it('sends configured inline credentials for their portal instead of naming stored ones', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-inline-'));
  const sandbox = await startSandbox({ seed: true });
  const fhir = await startFhirServer({ validate: true });
  const client = new RecordingClient({ baseUrl: sandbox.url, apiKey: sandbox.apiKey });
  const sync = createEligibilitySync({
    dataDir: dir,
    service: client,
    fhir: { baseUrl: fhir.url },
    inlineCredentials: { deltadentalins: { username: 'front-desk', password: 'portal-secret' } },
    settings: { idleMs: 50 },
    logger: createLogger({ level: 'silent' }),
  });
  try {
    await sync.start();
    await fhir.seed(chartOf('self'));
    await sync.notifyAppointment('appt-1001');
    await until('written', async () => (await sync.store.listChecks({ states: ['written'] })).length === 1);
    expect(client.sent).toHaveLength(1);
    expect(client.sent[0]).toMatchObject({ portalId: 'deltadentalins', credentials: { username: 'front-desk', password: 'portal-secret' } });
  } finally {
    await sync.stop();
    await client.close();
    await sandbox.close();
    await fhir.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
