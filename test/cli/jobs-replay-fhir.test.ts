import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import type { EligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { projectRoot } from '../../src/mapping-files';
import type { JobStore } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { cli } from '../support/cli';
import { startScriptedServer } from '../support/http-server';
import { postgresForTests } from '../support/postgres';
import { chartOf, searchFhir, startSyncInstance, until } from '../sync/harness';

/**
 * A FHIR notification the chart refused to let us read, kept as a dead letter, then replayed with
 * `jobs replay` once the chart allows it: the sync runs on a real store (a SQLite file, a
 * PostgreSQL database), the chart is the embedded FHIR server behind a real HTTP server that
 * refuses the appointment's read (403) until told otherwise, and jobs is the built executable.
 */
const bin = path.join(projectRoot, 'bin', 'dental-elig.js');
const postgres = postgresForTests();

interface Rig {
  dataDir: string;
  sandbox: Sandbox;
  fhir: FhirServer;
  store: JobStore;
  sync: EligibilitySync;
  httpUrl: string;
  /** The chart's base, as the sync and jobs reach it. */
  chartUrl: string;
  close(): Promise<void>;
}

/**
 * The sync on a store (SQLite in the data dir, or the PostgreSQL database at `location`), reading
 * the FHIR server seeded with one appointment through a server that answers 403 to what `refused`
 * names while it does.
 */
async function startRig(refused: (url: string) => boolean, location?: string): Promise<Rig> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'elig-replay-'));
  const sandbox = await startSandbox({ seed: true });
  const fhir = await startFhirServer({ validate: true });
  await fhir.seed(chartOf('primary-secondary'));
  const gate = await startScriptedServer(async (req, res) => {
    if (refused(req.url)) {
      return void res.writeHead(403, { 'content-type': 'application/fhir+json' }).end(JSON.stringify({ resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'forbidden', diagnostics: 'no access to Patient/pat-marco' }] }));
    }
    const body = req.method === 'GET' ? undefined : req.body;
    const upstream = await fetch(`${fhir.url}${req.url.replace(/^\/fhir/, '')}`, { method: req.method, headers: { accept: 'application/fhir+json', 'content-type': 'application/fhir+json' }, body });
    res.writeHead(upstream.status, { 'content-type': 'application/fhir+json' }).end(await upstream.text());
  });
  const chartUrl = `${gate.url}/fhir`;
  const store = await openJobStore(location, dataDir);
  const instance = await startSyncInstance({ store, dataDir, sandbox, fhir, secret: '', logger: createLogger({ level: 'silent' }), webhook: false, fhirVia: async () => chartUrl });
  return {
    dataDir,
    sandbox,
    fhir,
    store,
    sync: instance.sync,
    httpUrl: instance.httpUrl,
    chartUrl,
    async close() {
      await instance.close();
      await store.close();
      await gate.close();
      await sandbox.close();
      await fhir.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The verifications sent to the service. */
const sends = (sandbox: Sandbox) => sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification')).length;

describe.each(['SQLite', 'PostgreSQL'] as const)('jobs replay of a FHIR dead letter on %s', (kind) => {
  let rig: Rig;
  let refusing: boolean;
  /** Where jobs finds the store serve runs on. */
  let where: string[];

  beforeAll(() => {
    if (!existsSync(path.join(projectRoot, 'dist', 'cli', 'main.js'))) throw new Error('dist/ is missing: run `npm run build` first');
  });
  beforeEach(async () => {
    refusing = true;
    const location = kind === 'SQLite' ? undefined : await postgres.createDatabase();
    rig = await startRig((url) => refusing && url === '/fhir/Appointment/appt-4004', location);
    where = location === undefined ? ['--data-dir', rig.dataDir] : ['--store', location];
  });
  afterEach(async () => rig.close());

  /** The built executable, as an operator runs it beside serve, with the chart serve reads. */
  const jobs = async (...args: string[]) => {
    try {
      const { stdout, stderr } = await promisify(execFile)(process.execPath, [bin, 'jobs', ...args, ...where], { cwd: rig.dataDir, env: { PATH: process.env.PATH, DENTAL_ELIG_FHIR_URL: rig.chartUrl }, timeout: 15_000 });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };

  it('keeps the letter while the chart still refuses, verifies and writes once when it allows, and a second replay does nothing more', async () => {
    const { store } = rig;
    const notified = await fetch(`${rig.httpUrl}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
    expect(notified.status).toBe(422);
    const forbidden = 'Appointment/appt-4004: Appointment: the FHIR server answered 403 to the read: request (forbidden)';
    const listed = await jobs('messages', '--dead', '--json');
    const [letter] = JSON.parse(listed.stdout) as Array<{ id: number; kind: string; detail: string; replayable: boolean }>;
    expect(letter && [letter.kind, letter.detail, letter.replayable]).toEqual(['fhir-notification', forbidden, true]);
    const id = String(letter?.id);

    // The key or the permission not fixed yet: refused again, kept, and the exit code says so.
    expect(await jobs('replay', id)).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs replay: message ${id} was refused again (${forbidden}); it is kept as a dead letter (jobs messages --dead)\n` });
    expect((await store.listMessages({ status: 'dead' })).map((m) => m.id)).toEqual([letter?.id]);
    expect(await store.listChecks()).toEqual([]);

    refusing = false;
    expect(await jobs('replay', id)).toEqual({ code: 0, stdout: `message ${id}: replayed, Appointment/appt-4004: booked\n`, stderr: '' });
    await until('both plans written', async () => (await store.listChecks({ states: ['written'] })).length === 2);
    expect(await store.listMessages({ status: 'dead' })).toEqual([]);
    expect((await store.getMessage(Number(id)))?.detail).toBe('Appointment/appt-4004: booked (replayed)');

    // Replayed again (a script run twice): read as a duplicate, nothing verified or written again.
    expect(await jobs('replay', id)).toEqual({ code: 0, stdout: `message ${id}: replayed, Appointment/appt-4004: booked (nothing new: handled before)\n`, stderr: '' });
    await new Promise((r) => setTimeout(r, 500));
    expect(sends(rig.sandbox)).toBe(2);
    expect(await searchFhir(rig.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
    expect((await store.listChecks()).map((c) => [c.state, c.round])).toEqual([['written', 0], ['written', 0]]);
  });
});

/** In-process, on a SQLite file: what the letter's replay does when the appointment was handled meanwhile, and what it does not take. */
describe('jobs replay of FHIR letters', () => {
  let rig: Rig;
  let refusing: boolean;
  beforeEach(async () => {
    refusing = true;
    // The chart takes the patient's Coverages from this client only once it is allowed.
    rig = await startRig((url) => refusing && url.startsWith('/fhir/Coverage?'));
  });
  afterEach(async () => rig.close());

  const env = () => ({ DENTAL_ELIG_FHIR_URL: rig.chartUrl });
  const notify = (body: unknown) => fetch(`${rig.httpUrl}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify(body) });
  const appointmentChanged = { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: 'Appointment/appt-4004' }] };

  it('verifies nothing again for an appointment verified since its letter was kept, and marks the letter handled', async () => {
    const { store } = rig;
    expect((await notify(appointmentChanged)).status).toBe(422);
    const [letter] = await store.listMessages({ status: 'dead' });
    expect(letter?.detail).toBe('Appointment/appt-4004: Coverage: the FHIR server answered 403 to the search: request (forbidden)');
    // Allowed, the chart's next notification of the appointment verifies it before anyone replays the letter.
    refusing = false;
    expect((await notify(appointmentChanged)).status).toBe(200);
    await until('both plans written', async () => (await store.listChecks({ states: ['written'] })).length === 2);

    const replayed = await cli(['jobs', 'replay', String(letter?.id), '--data-dir', rig.dataDir, '--json'], env());
    expect([replayed.code, JSON.parse(replayed.stdout)]).toEqual([0, { message: letter?.id, read: 'Appointment/appt-4004: booked', fresh: false }]);
    await new Promise((r) => setTimeout(r, 300));
    expect(sends(rig.sandbox)).toBe(2);
    expect((await store.getMessage(letter?.id ?? -1))?.status).toBe('handled');
    // The letter's body, the notification as received, never reaches the output; the patient neither.
    expect(replayed.stdout + replayed.stderr).not.toMatch(/pat-marco|Alvarez|Bundle/);
  });

  it("replays a poll's letter as the poll would have read its appointment", async () => {
    const { store } = rig;
    expect(await rig.sync.pollAppointments()).toBe(1);
    const [letter] = await store.listMessages({ status: 'dead' });
    expect([letter?.raw, letter?.detail]).toEqual(['{"reference":"Appointment/appt-4004"}', 'Appointment/appt-4004: Coverage: the FHIR server answered 403 to the search: request (forbidden)']);
    refusing = false;
    const replayed = await cli(['jobs', 'replay', String(letter?.id), '--data-dir', rig.dataDir], env());
    expect([replayed.code, replayed.stdout]).toEqual([0, `message ${letter?.id}: replayed, Appointment/appt-4004: booked\n`]);
    await until('both plans written', async () => (await store.listChecks({ states: ['written'] })).length === 2);
    expect(sends(rig.sandbox)).toBe(2);
  });

  it('names what it does not replay, and the chart setting a FHIR letter needs', async () => {
    const { store, dataDir } = rig;
    expect((await notify({ resourceType: 'Observation', id: 'o-1' })).status).toBe(400);
    const refused = await cli(['jobs', 'replay', '--data-dir', dataDir, String((await store.listMessages({ status: 'dead' }))[0]?.id)], env());
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^dental-elig: jobs: message \d+ is a FHIR notification that names no resource the chart refused \(one unreadable, or one the sender was asked to send again\)\n$/);
    const table = await cli(['jobs', 'messages', '--dead', '--data-dir', dataDir]);
    expect(table.stdout.split('\n').map((line) => line.split(/ {2,}/).slice(0, 4))).toEqual([['ID', 'KIND', 'STATUS', 'REPLAY'], [expect.any(String), 'fhir-notification', 'dead', 'no'], ['']]);

    expect((await notify(appointmentChanged)).status).toBe(422);
    const [letter] = (await store.listMessages({ status: 'dead' })).filter((m) => m.detail?.startsWith('Appointment/'));
    expect(await cli(['jobs', 'replay', String(letter?.id), '--data-dir', dataDir])).toEqual({
      code: 2,
      stdout: '',
      stderr: "dental-elig: DENTAL_ELIG_FHIR_URL: not set (nor fhirUrl in the config file); a FHIR letter's replay reads the chart serve reads\n",
    });
    expect((await store.getMessage(letter?.id ?? -1))?.status).toBe('dead');
  });
});
