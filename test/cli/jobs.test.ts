import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { ingestHl7 } from '../../src/sync/ingest-hl7';
import { Database } from '../../src/sync/sqlite-driver';
import { SQLITE_SCHEMA_VERSION, SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { segment } from '../adapters/hl7/segment';
import { cli } from '../support/cli';
import { postgresForTests } from '../support/postgres';

/** `jobs` over a real store file, as an operator uses it next to a running serve. */
describe('dental-elig jobs', () => {
  let dir: string;
  const options = { mappings: loadHl7Mappings(), routing: loadClinicRouting(), now: () => new Date('2026-11-23T10:00:00Z'), policy: { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 } };
  const msh = (type: string, id: string, facility = 'BSD-MAIN') => `MSH|^~\\&|SMILECLOUD|${facility}|ELIG|BSD|20261123090000||${type}|${id}|P|2.5.1`;

  beforeEach(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'elig-jobs-'));
    const store = SqliteJobStore.open(dir);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J1'), 'SCH|APT-J1^SC||||||||||^^^20261210093000', 'PID|1||PJ-1^^^SC^MR||WHITAKER^ELLEN||19840302|F', segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'DD1234567' })].join('\r'), options);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J2'), 'SCH|APT-J2^SC||||||||||^^^20261211093000', 'PID|1||PJ-2^^^SC^MR||DOE^JANE||19800102|F'].join('\r'), options);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J3', 'NOWHERE-CLINIC'), 'SCH|APT-J3^SC||||||||||^^^20261211093000', 'PID|1||PJ-3^^^SC^MR||DOE^JANE||||F'].join('\r'), options);
    await store.close();
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('lists checks and bookings awaiting insurance or a correction, with ids and states but no patient names', async () => {
    const run = await cli(['jobs', 'list', '--data-dir', dir, '--json']);
    expect(run.code).toBe(0);
    const rows = JSON.parse(run.stdout) as Array<{ job: string; state: string; payer?: string; lastError?: string }>;
    expect(rows.map((r) => [r.state, r.payer])).toEqual([['received', 'Guardian'], ['awaiting-insurance', undefined], ['awaiting-correction', undefined]]);
    // Not "no insurance received": a booking whose only plan ended before the visit waits as well.
    expect(rows[1]?.lastError).toBe("no insurance in force on the visit's date received for the patient yet");
    // J3, refused for its missing birth date, names its letter.
    expect(rows[2]).toMatchObject({ job: 'hl7|NOWHERE-CLINIC|APT-J3', lastError: "its booking was refused for the patient's details (AE, message 3): booked once an ADT corrects them" });
    expect(run.stdout).not.toMatch(/WHITAKER|ELLEN|1984-03-02|DD1234567/);
    const table = await cli(['jobs', 'list', '--data-dir', dir]);
    expect(table.stdout.split('\n')[0]).toMatch(/^JOB +STATE +CLINIC +PAYER +DATE OF SERVICE +ATTEMPTS +OUTCOME +NEXT +LAST ERROR$/);
  });

  it("says each check's clinic, and lists one clinic's alone, its bookings awaiting insurance too: offices sharing one serve", async () => {
    const store = SqliteJobStore.open(dir);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J10', 'BSD-NORTH'), 'SCH|APT-J10^SC||||||||||^^^20261212093000', 'PID|1||PJ-10^^^SC^MR||DOE^JOHN||19800102|M', segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'DD10' })].join('\r'), options);
    await store.close();
    const all = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--json'])).stdout) as Array<{ state: string; clinic?: string }>;
    expect(all.map((r) => [r.state, r.clinic])).toEqual([['received', 'cln_sandbox_north'], ['received', 'cln_sandbox_main'], ['awaiting-insurance', 'cln_sandbox_main'], ['awaiting-correction', 'cln_sandbox_main']]);
    const north = await cli(['jobs', 'list', '--data-dir', dir, '--clinic', 'cln_sandbox_north']);
    expect(north.stdout.split('\n').filter((l) => l !== '').map((l) => l.split(/ +/).slice(1, 3))).toEqual([['STATE', 'CLINIC'], ['received', 'cln_sandbox_north']]);
    const main = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--clinic', 'cln_sandbox_main', '--json'])).stdout) as Array<{ state: string }>;
    expect(main.map((r) => r.state)).toEqual(['received', 'awaiting-insurance', 'awaiting-correction']);
  });

  it('refuses a --clinic or --portal that nothing names, rather than listing none or retrying none and exiting 0', async () => {
    const run = async (...args: string[]) => {
      const done = await cli(['jobs', ...args, '--data-dir', dir]);
      return [done.code, done.stderr];
    };
    expect(await run('list', '--clinic', 'cln_sandbox_mian')).toEqual([2, 'dental-elig: --clinic: cln_sandbox_mian is no clinic of mappings/clinics.json nor of any check in the job store\n']);
    expect(await run('list', '--clinic', 'cln_sandbox_mian', '--json')).toEqual([2, 'dental-elig: --clinic: cln_sandbox_mian is no clinic of mappings/clinics.json nor of any check in the job store\n']);
    // A clinic clinics.json lists with nothing in the store, or nothing in that state, has none to list: that is no typo.
    expect(await cli(['jobs', 'list', '--clinic', 'cln_sandbox_north', '--data-dir', dir, '--json'])).toEqual({ code: 0, stdout: '[]\n', stderr: '' });
    expect(await cli(['jobs', 'list', '--clinic', 'cln_sandbox_main', '--state', 'dead', '--data-dir', dir, '--json'])).toEqual({ code: 0, stdout: '[]\n', stderr: '' });
    expect(await run('retry', '--state', 'needs-attention', '--clinic', 'cln_sandbox_mian')).toEqual([2, 'dental-elig: --clinic: cln_sandbox_mian is no clinic of mappings/clinics.json nor of any check in the job store\n']);
    expect(await run('retry', '--state', 'needs-attention', '--portal', 'deltadentail')).toEqual([2, "dental-elig: --portal: no check in the job store was sent to deltadentail (jobs show names a check's portal)\n"]);
    expect(await cli(['jobs', 'retry', '--state', 'needs-attention', '--clinic', 'cln_sandbox_north', '--data-dir', dir])).toEqual({ code: 0, stdout: '0 checks retried\n', stderr: '' });
  });

  it('takes the key jobs list gives a booking awaiting insurance to show, and says why retry and dismiss have nothing to act on', async () => {
    const [booking] = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'awaiting-insurance', '--json'])).stdout) as Array<{ job: string }>;
    expect(booking?.job).toBe('hl7|BSD-MAIN|APT-J2');
    const shown = await cli(['jobs', 'show', 'hl7|BSD-MAIN|APT-J2', '--data-dir', dir]);
    expect([shown.code, shown.stderr]).toEqual([0, '']);
    expect(shown.stdout).toMatch(/^state +awaiting-insurance$/m);
    expect(shown.stdout).toMatch(/^clinic +cln_sandbox_main$/m);
    expect(shown.stdout).not.toMatch(/DOE|JANE|1980-01-02/);
    const json = JSON.parse((await cli(['jobs', 'show', 'hl7|BSD-MAIN|APT-J2', '--data-dir', dir, '--json'])).stdout) as { job: string; state: string; checks: string[] };
    expect(json).toMatchObject({ job: 'hl7|BSD-MAIN|APT-J2', state: 'awaiting-insurance', checks: [] });
    const why = "hl7|BSD-MAIN|APT-J2 is a booking awaiting the patient's insurance, not a check: its checks are made once insurance in force on its date comes (an ADT or another booking from the PMS)";
    expect(await cli(['jobs', 'retry', 'hl7|BSD-MAIN|APT-J2', '--data-dir', dir])).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: ${why}\n` });
    expect(await cli(['jobs', 'dismiss', 'hl7|BSD-MAIN|APT-J2', '--data-dir', dir])).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: ${why}\n` });
    expect((await cli(['jobs', 'show', 'hl7|BSD-MAIN|APT-NONE', '--data-dir', dir])).stderr).toBe('dental-elig: jobs show: no check with key hl7|BSD-MAIN|APT-NONE\n');
  });

  it('takes the key jobs list gives a booking awaiting a correction to show, and says why retry has nothing to act on', async () => {
    const held = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'awaiting-correction', '--json'])).stdout) as Array<{ job: string }>;
    expect(held.map((r) => r.job)).toEqual(['hl7|NOWHERE-CLINIC|APT-J3']);
    const shown = await cli(['jobs', 'show', 'hl7|NOWHERE-CLINIC|APT-J3', '--data-dir', dir]);
    expect(shown.stdout).toMatch(/^waitingFor +its booking was refused for the patient's details \(AE, message 3\): booked once an ADT corrects them$/m);
    expect(await cli(['jobs', 'retry', 'hl7|NOWHERE-CLINIC|APT-J3', '--data-dir', dir])).toEqual({
      code: 1,
      stdout: '',
      stderr: "dental-elig: jobs: hl7|NOWHERE-CLINIC|APT-J3 is a booking refused for the patient's details, not a check: its checks are made once an ADT from the PMS corrects them\n",
    });
  });

  it('filters on every state its STATE column shows, awaiting-insurance too', async () => {
    const run = await cli(['jobs', 'list', '--data-dir', dir, '--state', 'awaiting-insurance', '--json']);
    expect(run.code).toBe(0);
    expect((JSON.parse(run.stdout) as Array<{ state: string }>).map((r) => r.state)).toEqual(['awaiting-insurance']);
    const received = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'received', '--json'])).stdout) as Array<{ state: string }>;
    expect(received.map((r) => r.state)).toEqual(['received']);
    // A state mistyped is told the states it may be, awaiting-insurance among them as --help says.
    expect(await cli(['jobs', 'list', '--data-dir', dir, '--state', 'awaiting'])).toEqual({
      code: 2,
      stdout: '',
      stderr: 'dental-elig: --state: awaiting is not a state (received, submitted, awaiting-result, result-stored, written, needs-attention, ending-coverage, cancelled, dead, awaiting-insurance, awaiting-correction)\n',
    });
  });

  it('shows one check, and retries only what a person may send back', async () => {
    const [row] = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'received', '--json'])).stdout) as Array<{ job: string }>;
    const shown = await cli(['jobs', 'show', row?.job ?? '', '--data-dir', dir]);
    expect(shown.stdout).toMatch(/^state +received$/m);
    expect(shown.stdout).not.toMatch(/WHITAKER|DD1234567/);
    expect(await cli(['jobs', 'retry', row?.job ?? '', '--data-dir', dir])).toEqual({
      code: 1,
      stdout: '',
      stderr: `dental-elig: jobs: check ${row?.job} is received; a check is retried when it is needs-attention, dead, cancelled, written\n`,
    });
    expect((await cli(['jobs', 'show', 'elig_nope', '--data-dir', dir])).stderr).toBe('dental-elig: jobs show: no check with key elig_nope\n');
    // What the PMS got wrong that the check went ahead without is shown with it, as its ACK said.
    const store = SqliteJobStore.open(dir);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J4'), 'SCH|APT-J4^SC||||||||||^^^20261212093000', 'PID|1||PJ-4^^^SC^MR||DOE^JOHN||19800102|M', segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'DD7654321' }), 'AIP|1||1234567890^CHEN^LAURA|D'].join('\r'), options);
    const [warned] = (await store.listChecks()).filter((c) => c.check.warnings);
    await store.close();
    expect((await cli(['jobs', 'show', warned?.key ?? '', '--data-dir', dir])).stdout).toMatch(/^warnings +AIP-3\.1: provider NPI fails the check digit: verified without it$/m);
    expect(shown.stdout).not.toMatch(/^warnings/m);
    expect((await cli(['jobs', 'list', '--state', 'lost', '--data-dir', dir])).code).toBe(2);
  });

  it('retries a written check as a new round that shows no outcome until its own result comes', async () => {
    const [row] = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'received', '--json'])).stdout) as Array<{ job: string }>;
    const key = row?.job ?? '';
    const store = SqliteJobStore.open(dir);
    await store.transaction(async (tx) => {
      const check = await tx.getCheck(key);
      if (!check) throw new Error('no check');
      const result = { correlationId: 'ver-old', status: 'Completed', result: { plan: { status: 'Active' } } };
      await tx.putCheck({ ...check, state: 'written', correlationId: 'ver-old', result, resultAt: '2026-11-23T10:00:05.000Z', written: { requestId: 'req-1', responseId: 'resp-1' } });
    });
    await store.close();
    const before = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'written', '--json'])).stdout) as Array<{ outcome?: string }>;
    expect(before.map((r) => r.outcome)).toEqual(['completed']);
    expect((await cli(['jobs', 'retry', key, '--data-dir', dir])).code).toBe(0);
    const after = JSON.parse((await cli(['jobs', 'show', key, '--data-dir', dir, '--json'])).stdout) as Record<string, unknown>;
    expect([after.state, after.round, after.correlationId, after.result, after.resultAt]).toEqual(['received', 1, undefined, undefined, undefined]);
  });

  it('retries every check waiting for a person over one failure kind and portal, once the person has fixed it, and only those', async () => {
    const store = SqliteJobStore.open(dir);
    for (const [id, name, member] of [['J5', 'DOE^JOHN', 'DD5'], ['J6', 'ROE^RITA', 'DD6'], ['J7', 'POE^PAUL', 'DD7']] as const) {
      await ingestHl7(store, [msh('SIU^S12^SIU_S12', id), `SCH|APT-${id}^SC||||||||||^^^20261212093000`, `PID|1||P${id}^^^SC^MR||${name}||19800102|M`, segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: member })].join('\r'), options);
    }
    const failed = (kind: string, i: number) => ({ correlationId: `ver-${i}`, status: 'Failed', result: { type: `https://api.example/problems/${kind}`, title: kind, detail: 'refused' } });
    const rows = await store.listChecks({ states: ['received'] });
    expect(rows).toHaveLength(4);
    // Two refused for the portal's credentials, one of another portal, one the payer did not find.
    const fates: Array<[string, string]> = [['InvalidCredentials', 'portal-a'], ['InvalidCredentials', 'portal-a'], ['InvalidCredentials', 'portal-b'], ['PatientNotFound', 'portal-a']];
    await store.transaction(async (tx) => {
      for (const [i, row] of rows.entries()) {
        const [kind, portalId] = fates[i] as [string, string];
        const { dueAt: _due, ...rest } = row;
        await tx.putCheck({ ...rest, state: 'needs-attention', portalId, correlationId: `ver-${i}`, result: failed(kind, i), resultAt: '2026-11-23T10:00:05.000Z', lastError: 'refused' });
      }
    });
    await store.close();
    const keys = rows.map((r) => r.key);

    const listed = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'needs-attention', '--json'])).stdout) as Array<{ job: string; outcome: string; failureKind: string }>;
    expect(Object.fromEntries(listed.map((r) => [r.job, `${r.outcome} ${r.failureKind}`]))).toEqual(Object.fromEntries(keys.map((k, i) => [k, `failed ${fates[i]?.[0]}`])));
    expect((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'needs-attention'])).stdout).toMatch(/ failed \(InvalidCredentials\) /);

    const run = await cli(['jobs', 'retry', '--state', 'needs-attention', '--failure-kind', 'InvalidCredentials', '--portal', 'portal-a', '--data-dir', dir]);
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n').filter((l) => l.endsWith('a running serve picks it up')).map((l) => l.split(':')[0]).sort()).toEqual([keys[0], keys[1]].sort());
    expect(run.stdout).toMatch(/^2 checks retried$/m);
    const after = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--json'])).stdout) as Array<{ job: string; state: string }>;
    expect(keys.map((k) => after.find((r) => r.job === k)?.state)).toEqual(['received', 'received', 'needs-attention', 'needs-attention']);
    // Nothing left that matches: said, and not an error.
    const again = await cli(['jobs', 'retry', '--state', 'needs-attention', '--failure-kind', 'InvalidCredentials', '--portal', 'portal-a', '--data-dir', dir, '--json']);
    expect([again.code, JSON.parse(again.stdout)]).toEqual([0, []]);
    // Named, each on its own: one serve already has back is refused, and the other retried all the same.
    const named = await cli(['jobs', 'retry', keys[0] ?? '', keys[2] ?? '', '--data-dir', dir]);
    expect(named).toEqual({
      code: 1,
      stdout: `${keys[2]}: received again (round 1); a running serve picks it up\n`,
      stderr: `dental-elig: jobs: check ${keys[0]} is received; a check is retried when it is needs-attention, dead, cancelled, written\n`,
    });
  });

  it("retries one clinic's checks its portal credentials failed, not another clinic's on the same portal", async () => {
    const store = SqliteJobStore.open(dir);
    for (const [id, facility] of [['J8', 'BSD-MAIN'], ['J9', 'BSD-NORTH']] as const) {
      await ingestHl7(store, [msh('SIU^S12^SIU_S12', id, facility), `SCH|APT-${id}^SC||||||||||^^^20261212093000`, `PID|1||P${id}^^^SC^MR||DOE^JOHN||19800102|M`, segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: `DD${id}` })].join('\r'), options);
    }
    const rows = (await store.listChecks({ states: ['received'] })).filter((r) => r.check.patient.lastName === 'DOE');
    const refused = (i: number) => ({ correlationId: `ver-c${i}`, status: 'Failed', result: { type: 'https://api.example/problems/InvalidCredentials', title: 'InvalidCredentials', detail: 'refused' } });
    await store.transaction(async (tx) => {
      for (const [i, { dueAt: _due, ...row }] of rows.entries()) {
        await tx.putCheck({ ...row, state: 'needs-attention', portalId: 'portal-a', correlationId: `ver-c${i}`, result: refused(i), resultAt: '2026-11-23T10:00:05.000Z', lastError: 'refused' });
      }
    });
    await store.close();
    const north = rows.find((r) => r.check.clinicId === 'cln_sandbox_north')?.key;
    expect(rows.map((r) => r.check.clinicId).sort()).toEqual(['cln_sandbox_main', 'cln_sandbox_north']);

    const run = await cli(['jobs', 'retry', '--state', 'needs-attention', '--failure-kind', 'InvalidCredentials', '--portal', 'portal-a', '--clinic', 'cln_sandbox_north', '--data-dir', dir, '--json']);
    expect([run.code, (JSON.parse(run.stdout) as Array<{ job: string }>).map((r) => r.job)]).toEqual([0, [north]]);
    const after = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'needs-attention', '--json'])).stdout) as Array<{ job: string }>;
    expect(after.map((r) => r.job)).toEqual(rows.filter((r) => r.key !== north).map((r) => r.key));
    expect((await cli(['jobs', 'retry', '--clinic', 'cln_sandbox_north', '--data-dir', dir])).stderr).toBe('dental-elig: jobs retry: --clinic narrows --state; give --state too\n');
  });

  it('says how to name the checks to retry, and refuses a state that is not retried', async () => {
    const refused = async (...args: string[]) => {
      const run = await cli(['jobs', 'retry', ...args, '--data-dir', dir]);
      return [run.code, run.stderr];
    };
    expect(await refused()).toEqual([2, 'dental-elig: jobs retry: name the checks to retry, or give --state to retry every check in a state\n']);
    expect(await refused('--failure-kind', 'InvalidCredentials')).toEqual([2, 'dental-elig: jobs retry: --failure-kind narrows --state; give --state too\n']);
    expect(await refused('--state', 'received')).toEqual([2, 'dental-elig: --state: received checks are not retried (needs-attention, dead, cancelled, written)\n']);
    // A misspelt kind would retry nothing and say all was well.
    expect(await refused('--state', 'needs-attention', '--failure-kind', 'InvalidCredential')).toEqual([2, 'dental-elig: --failure-kind: InvalidCredential is no kind in mappings/failure-kinds.json, and no needs-attention check failed with it\n']);
    expect(await refused('elig_1', '--state', 'dead')).toEqual([2, 'dental-elig: jobs retry: name the checks or select them with --state, not both\n']);
  });

  it('lists dead letters with what was wrong, and replays one', async () => {
    const dead = JSON.parse((await cli(['jobs', 'messages', '--dead', '--data-dir', dir, '--json'])).stdout) as Array<{ id: number; detail: string }>;
    expect(dead).toHaveLength(1);
    expect(dead[0]?.detail).toMatch(/^rejected: /);
    const replayed = await cli(['jobs', 'replay', String(dead[0]?.id), '--data-dir', dir]);
    expect(replayed.stdout).toMatch(new RegExp(`^message ${dead[0]?.id}: handled again, ACK A[ER]\\n$`));
    // Still refused: the exit code says so, for a script replaying dead letters after a fix.
    expect(replayed.code).toBe(1);
    expect(replayed.stderr).toMatch(new RegExp(`^dental-elig: jobs replay: message ${dead[0]?.id} was answered A[ER] again; its replay is kept as a dead letter \\(jobs messages --dead\\)\\n$`));
    const after = JSON.parse((await cli(['jobs', 'messages', '--data-dir', dir, '--json'])).stdout) as Array<{ id: number; status: string; detail: string }>;
    expect(after.find((m) => m.id === dead[0]?.id)?.detail).toMatch(/^replayed as message \d+$/);
  });

  it('says of a booking that made no check why, as its ACK warned: a plan that ended before the visit is not a patient paying for themselves', async () => {
    const store = SqliteJobStore.open(dir);
    await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'J9'), 'SCH|APT-J9^SC||||||||||^^^20261215093000', 'PID|1||PJ-9^^^SC^MR||DOE^JOHN||19800102|M', segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 13: '20261031', 17: 'SEL', 36: 'DD9999999' })].join('\r'), options);
    await store.close();
    const messages = JSON.parse((await cli(['jobs', 'messages', '--data-dir', dir, '--json'])).stdout) as Array<{ detail: string }>;
    expect(messages[0]?.detail).toBe('book: 0 checks, self-pay; warned: IN1-13: plan ended before the date of service: not verified');
  });

  it('dismisses a dead letter a person has dealt with, for the prune to take once its time is over, and nothing else', async () => {
    const [dead] = JSON.parse((await cli(['jobs', 'messages', '--dead', '--data-dir', dir, '--json'])).stdout) as Array<{ id: number; detail: string }>;
    if (!dead) throw new Error('the beforeEach bookings made no dead letter');

    const run = await cli(['jobs', 'dismiss', String(dead.id), '--data-dir', dir]);
    expect(run).toEqual({ code: 0, stdout: `message ${dead.id}: dismissed\n`, stderr: '' });
    const messages = JSON.parse((await cli(['jobs', 'messages', '--data-dir', dir, '--json'])).stdout) as Array<{ id: number; status: string; detail: string; replayable: boolean }>;
    expect(messages.find((m) => m.id === dead.id)).toMatchObject({ status: 'handled', detail: `dismissed by a person (jobs dismiss): ${dead.detail}` });
    expect(JSON.parse((await cli(['jobs', 'messages', '--dead', '--data-dir', dir, '--json'])).stdout)).toEqual([]);

    // What is no dead letter is refused by name, the rest of the command done; so is a check not left to a person.
    const again = await cli(['jobs', 'dismiss', String(dead.id), '999', '--data-dir', dir]);
    expect(again).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: message ${dead.id} is handled; a message is dismissed when it is a dead letter (and 1 more refused)\n` });
    const [check] = JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--json'])).stdout) as Array<{ job: string }>;
    expect(await cli(['jobs', 'dismiss', check?.job ?? 'elig_x', '--data-dir', dir])).toEqual({
      code: 1,
      stdout: '',
      stderr: `dental-elig: jobs: check ${check?.job} is received; a check is dismissed when it is needs-attention or dead\n`,
    });
    expect(await cli(['jobs', 'dismiss', 'APT-J1', '--data-dir', dir])).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: jobs dismiss: give message ids (whole numbers, jobs messages --dead) or check keys (elig_…, jobs list)\n' });
  });

  it('dismisses a check left to a person until it changes, and retries it all the same', async () => {
    const store = SqliteJobStore.open(dir);
    const [received] = await store.listChecks();
    if (!received) throw new Error('the beforeEach bookings made no check');
    const { dueAt: _due, ...rest } = received;
    await store.transaction((tx) => tx.putCheck({ ...rest, state: 'needs-attention', lastError: 'PatientNotFound' }));
    await store.close();
    const key = received.key;
    const listed = async () => (JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--state', 'needs-attention', '--json'])).stdout) as Array<{ job: string; dismissed?: boolean }>)[0];
    expect(await listed()).not.toHaveProperty('dismissed');
    // What a person has still to deal with: this one, until dismissed.
    const forAPerson = async () => (JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--for-a-person', '--json'])).stdout) as Array<{ job: string }>).map((r) => r.job);
    expect(await forAPerson()).toEqual([received.key]);
    expect(await cli(['jobs', 'list', '--data-dir', dir, '--for-a-person', '--state', 'dead'])).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: jobs list: give --state or --for-a-person, not both\n' });

    expect(await cli(['jobs', 'dismiss', key, '--data-dir', dir, '--json'])).toEqual({ code: 0, stdout: `${JSON.stringify([key])}\n`, stderr: '' });
    // Still needing attention, as the pipeline sees it: a person has dealt with it.
    expect(await listed()).toMatchObject({ job: key, dismissed: true });
    expect(await forAPerson()).toEqual([]);
    expect((await cli(['jobs', 'list', '--data-dir', dir])).stdout).toMatch(new RegExp(`^${key} +needs-attention \\(dismissed\\) `, 'm'));
    expect((await cli(['jobs', 'show', key, '--data-dir', dir])).stdout).toMatch(/^dismissed +\d{4}-\d{2}-\d{2}T/m);
    expect(await cli(['jobs', 'dismiss', key, '--data-dir', dir])).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: check ${key} is dismissed already\n` });
    // The PMS sending the booking again, changing nothing, leaves it as the person left it.
    const again = SqliteJobStore.open(dir);
    await ingestHl7(again, [msh('SIU^S14^SIU_S12', 'J1-again'), 'SCH|APT-J1^SC||||||||||^^^20261210093000', 'PID|1||PJ-1^^^SC^MR||WHITAKER^ELLEN||19840302|F', segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'DD1234567' })].join('\r'), options);
    await again.close();
    expect(await listed()).toMatchObject({ job: key, dismissed: true });

    // Sent again, it is a new round, waiting for no person until it fails again.
    expect((await cli(['jobs', 'retry', key, '--data-dir', dir])).code).toBe(0);
    const retried = (JSON.parse((await cli(['jobs', 'list', '--data-dir', dir, '--json'])).stdout) as Array<{ job: string; state: string; dismissed?: boolean }>).find((r) => r.job === key);
    expect(retried).toEqual(expect.objectContaining({ state: 'received' }));
    expect(retried).not.toHaveProperty('dismissed');
  });

  it("finds serve's store where serve's config file puts it, and names a config file it cannot use", async () => {
    const config = path.join(dir, 'serve.json');
    writeFileSync(config, JSON.stringify({ dataDir: dir, settings: { freshnessDays: 3 } }));
    const run = await cli(['jobs', 'list', '--json', '--config', config]);
    expect(run.code).toBe(0);
    expect((JSON.parse(run.stdout) as unknown[]).length).toBe(3);
    // The environment names it too, as for serve.
    expect(JSON.parse((await cli(['jobs', 'list', '--json'], { DENTAL_ELIG_CONFIG: config })).stdout)).toHaveLength(3);

    // An empty variable stood over the file's dataDir and opened the working folder's store, where serve refuses it.
    expect(await cli(['jobs', 'list', '--config', config], { DENTAL_ELIG_DATA_DIR: '' })).toEqual({
      code: 2,
      stdout: '',
      stderr: `dental-elig: DENTAL_ELIG_DATA_DIR: must not be empty (leave it out for ${path.join('.dental-elig', 'data')})\n`,
    });

    writeFileSync(config, JSON.stringify({ dataDir: dir, settings: { freshnessDays: 'a week' } }));
    const refused = await cli(['jobs', 'list', '--config', config]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^dental-elig: .*serve\.json: settings\.freshnessDays: .+\n$/);
  });

  it('leaves a store of an older schema as it is, for the serve of that version still working it, and says how it is upgraded', async () => {
    // Schema 6, as the serve of the version before leaves it: the index schema 7 adds is not there yet.
    const file = path.join(dir, 'dental-elig.sqlite');
    const db = new Database(file);
    db.exec('DROP INDEX checks_submitted');
    db.pragma('user_version = 6');
    db.close();
    const run = await cli(['jobs', 'list', '--data-dir', dir]);
    expect(run).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: cannot open the job store (job store schema version 6 is older than this program's (${SQLITE_SCHEMA_VERSION}); start serve of this version on it first, which upgrades it)\n` });
    const after = new Database(file, { readonly: true });
    expect([after.pragma('user_version', { simple: true }), after.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'checks_submitted'").pluck().get()]).toEqual([6, 0]);
    after.close();
    // Serve's open upgrades it, and the jobs commands read it then.
    await SqliteJobStore.open(dir).close();
    expect((await cli(['jobs', 'list', '--data-dir', dir])).code).toBe(0);
  });

  it('says there is no job store where a data dir names none, and creates nothing there', async () => {
    const typo = path.join(dir, 'dat');
    const run = await cli(['jobs', 'list', '--data-dir', typo]);
    expect(run).toEqual({ code: 1, stdout: '', stderr: `dental-elig: jobs: cannot open the job store (no job store at ${path.join(typo, 'dental-elig.sqlite')}; serve creates it)\n` });
    expect(existsSync(typo)).toBe(false);
  });

  it("names in each command's --help the variables it reads: the store's, for list and retry the mappings (failure kinds), and for replay the chart serve reads and the mappings", async () => {
    const variables = async (command: string) => [...(await cli(['jobs', command, '--help'])).stdout.matchAll(/^ {2}(DENTAL_ELIG_[A-Z_]+) +\S/gm)].map((m) => m[1]);
    const store = ['DENTAL_ELIG_DATA_DIR', 'DENTAL_ELIG_STORE', 'DENTAL_ELIG_CONFIG'];
    for (const command of ['show', 'messages']) expect(await variables(command)).toEqual(store);
    for (const command of ['list', 'retry']) expect(await variables(command)).toEqual([...store, 'DENTAL_ELIG_MAPPINGS']);
    expect(await variables('replay')).toEqual([...store, 'DENTAL_ELIG_FHIR_URL', 'DENTAL_ELIG_FHIR_TOKEN', 'DENTAL_ELIG_FHIR_CLIENT_ID', 'DENTAL_ELIG_FHIR_PRIVATE_KEY_FILE', 'DENTAL_ELIG_ALLOW_INSECURE_HTTP', 'DENTAL_ELIG_MAPPINGS']);
  });
});

/** `jobs` against a PostgreSQL store it cannot open, as an operator meets a mistyped URL. */
describe('dental-elig jobs on PostgreSQL', () => {
  const postgres = postgresForTests();

  it('says what PostgreSQL refused in its words, not its SQLSTATE: a database that is not there is named so, as serve names it', async () => {
    const url = new URL(await postgres.createDatabase());
    url.pathname = '/eligibilty';
    const run = await cli(['jobs', 'list', '--store', url.href]);
    expect(run).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: jobs: cannot open the job store (database "eligibilty" does not exist)\n' });
  });
});
