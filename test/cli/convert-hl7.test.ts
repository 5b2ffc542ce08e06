import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { EligibilityCheck } from '../../src/domain';
import type { CatalogSnapshot } from '../../src/verification/payer-catalog';
import { VerificationRequest } from '../../src/verification/wire';
import { FIXTURE_DIR, RECEIVED_AT, type ExpectedMessage } from '../adapters/hl7/corpus';
import { cli } from '../support/cli';

const fixture = (name: string) => path.join(FIXTURE_DIR, `${name}.hl7`);
const convert = (name: string, ...args: string[]) => cli(['convert', 'hl7', fixture(name), '--received-at', RECEIVED_AT, ...args]);

/** The checks a fixture's golden file lists, as the CLI prints them without a catalog. */
async function expectedChecks(name: string): Promise<unknown[]> {
  const expected = JSON.parse(await readFile(path.join(FIXTURE_DIR, `${name}.expected.json`), 'utf8')) as { messages: ExpectedMessage[] };
  return expected.messages.flatMap((m) => (m.outcome && 'checks' in m.outcome ? m.outcome.checks : [])).map((c) => {
    const { resolution: _resolution, ...coverage } = c.coverage;
    return { ...c, coverage };
  });
}

describe('dental-elig convert hl7', () => {
  it('prints the checks of a file as one JSON array, an ADT earlier in the file giving the SIU its insurance', async () => {
    const run = await convert('carepoint-adt-a04-then-siu-s12');
    expect(run).toMatchObject({ code: 0, stderr: '' });
    const printed = JSON.parse(run.stdout) as unknown[];
    expect(printed).toEqual(await expectedChecks('carepoint-adt-a04-then-siu-s12'));
    for (const check of printed) expect(EligibilityCheck.safeParse(check).success).toBe(true);
  });

  it('reads a message type written in lower case as serve does', async () => {
    const run = await convert('generic-lower-case-message-type');
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(run.stdout)).toEqual(await expectedChecks('generic-lower-case-message-type'));
  });

  it('prints one check per insurance across a batch file', async () => {
    const run = await convert('generic-v24-batch');
    expect(JSON.parse(run.stdout)).toEqual(await expectedChecks('generic-v24-batch'));
  });

  it('says on stderr, as serve\'s ACK does in its W ERRs, what it left out: plans not in force on the visit', async () => {
    const run = await convert('generic-four-plans-at-new-year');
    expect(JSON.parse(run.stdout)).toEqual(await expectedChecks('generic-four-plans-at-new-year'));
    expect(run.stderr.split('\n').filter(Boolean)).toEqual([
      'dental-elig: warning: PH-8101: IN1[3]-12: plan begins after the date of service: not verified',
      'dental-elig: warning: PH-8101: IN1[4]-12: plan begins after the date of service: not verified',
      'dental-elig: warning: PH-8102: IN1-13: plan ended before the date of service: not verified',
      'dental-elig: warning: PH-8102: IN1[2]-13: plan ended before the date of service: not verified',
    ]);
    expect(run.code).toBe(0);
  });

  it('leaves out checks a later message in the file replaced or cancelled', async () => {
    const rescheduled = JSON.parse((await convert('molarpms-siu-s13-reschedule')).stdout) as EligibilityCheck[];
    expect(rescheduled.map((c) => [c.source.kind === 'hl7' && c.source.messageControlId, c.dateOfService])).toEqual([['MP-0011', '2024-06-21']]);
    expect(JSON.parse((await convert('molarpms-siu-s15-cancel')).stdout)).toEqual([]);
    expect(JSON.parse((await convert('molarpms-siu-s16-discontinue')).stdout)).toEqual([]);
    expect(JSON.parse((await convert('molarpms-siu-s17-delete-without-patient')).stdout)).toEqual([]);
  });

  it('prints the booking of a patient merged into another (A40) under the kept patient, as the sidecar verifies it', async () => {
    const text = await readFile(fixture('carepoint-adt-a40-merge'), 'utf8');
    // Up to the A40: the duplicate's booking is the last word on it.
    const upToMerge = text.split(/(?=MSH\|)/).slice(0, 3).join('');
    const printed = JSON.parse((await cli(['convert', 'hl7', '-', '--received-at', RECEIVED_AT], {}, upToMerge)).stdout) as EligibilityCheck[];
    expect(printed.map((c) => [c.dateOfService, c.patient.identifiers.map((i) => i.value), c.subscriber.memberId])).toEqual([['2024-06-12', ['CP-558120', '4471'], 'U12345678']]);
  });

  it('keeps the check a cancelled or moved appointment shares with another of the same day', async () => {
    const source = (c: EligibilityCheck) => (c.source.kind === 'hl7' ? [c.source.appointmentId, c.dateOfService] : []);
    const cancelled = JSON.parse((await convert('molarpms-siu-s15-cancel-one-of-two-same-day')).stdout) as EligibilityCheck[];
    expect(cancelled.map(source)).toEqual([['APT1051', '2024-06-27']]);
    const moved = await readFile(fixture('molarpms-siu-s13-reschedule-one-of-two-same-day'), 'utf8');
    // Up to the S13: the first appointment's new day, and the day the second still holds.
    const upToMove = moved.split(/(?=MSH\|)/).slice(0, 3).join('');
    const kept = JSON.parse((await cli(['convert', 'hl7', '-', '--received-at', RECEIVED_AT], {}, upToMove)).stdout) as EligibilityCheck[];
    expect(kept.map(source)).toEqual([
      ['APT1060', '2024-07-01'],
      ['APT1061', '2024-06-28'],
    ]);
    expect((JSON.parse((await convert('molarpms-siu-s13-reschedule-one-of-two-same-day')).stdout) as EligibilityCheck[]).map(source)).toEqual([['APT1060', '2024-07-01']]);
  });

  it('keeps the shared check when one appointment is cancelled without its patient, whichever booked last', async () => {
    const text = await readFile(fixture('molarpms-siu-s15-cancel-one-of-two-same-day'), 'utf8');
    const [first = '', second = ''] = text.split(/(?=MSH\|)/);
    // An S17 without PID for the second (the later) appointment: only the first still needs the day.
    const deleteSecond = ['MSH|^~\\&|MOLARPMS|BSD-MAIN|DENTAL-ELIG|BSD|20240525080000||SIU^S17^SIU_S12|MP-0059|P|2.5.1', 'SCH|APT1051^MOLARPMS', 'RGS|1|A'].join('\r');
    const run = await cli(['convert', 'hl7', '-', '--received-at', RECEIVED_AT], {}, `${first}${second}${deleteSecond}\r`);
    const checks = JSON.parse(run.stdout) as EligibilityCheck[];
    expect(checks.map((c) => c.source.kind === 'hl7' && c.source.appointmentId)).toEqual(['APT1050']);
  });

  it('reads standard input for -', async () => {
    const text = await readFile(fixture('cuspdesk-x12-relationship-codes'), 'utf8');
    const run = await cli(['convert', 'hl7', '-', '--received-at', RECEIVED_AT], {}, text);
    expect((JSON.parse(run.stdout) as EligibilityCheck[]).map((c) => c.subscriber.relationship)).toEqual(['self', 'spouse', 'child']);
  });

  it.each([
    ['reject-missing-birth-date', 'dental-elig: SC-E01: PID-7: birth date missing\n'],
    ['reject-not-hl7', 'dental-elig: #1: MSH: message does not start with an MSH segment\n'],
    ['reject-v23-appointment-start-missing', 'dental-elig: CD-E09: SCH-11.4: appointment start missing\n'],
    ['reject-unsupported-message-type', 'dental-elig: SC-E07: MSH-9: message type ORU is not supported\n'],
  ])('exits 1 on %s with one line naming the field, nothing on stdout', async (name, line) => {
    expect(await convert(name)).toEqual({ code: 1, stdout: '', stderr: line });
  });

  it('reads a file in the character set its MSH-18 names, as serve reads a frame, and says when its bytes fit none', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'convert-hl7-'));
    try {
      // A Windows PMS's export: É is 0xC9, the apostrophe of O’Brien 0x92.
      const windows = (msh18: string) =>
        Buffer.from(
          [
            `MSH|^~\\&|WINDENT|BSD-MAIN|DENTAL-ELIG|BSD|20240520083000||SIU^S12^SIU_S12|WD-1|P|2.5.1||||||${msh18}`,
            'SCH|APT-W1^WINDENT||||||||60|min|^^^202406251300',
            'PID|1||WD-41^^^WINDENT^MR||O\x92BRIEN^JOS\xc9||19950302|M',
            `IN1|1|DPPO^Delta Dental PPO|CDCA1|Delta Dental of California${'|'.repeat(13)}SEL${'|'.repeat(19)}DDC1234567`,
            'RGS|1|A',
          ].join('\r'),
          'latin1',
        );
      const file = path.join(dir, 'export.hl7');
      await writeFile(file, windows('8859/1'));
      const run = await cli(['convert', 'hl7', file, '--received-at', RECEIVED_AT]);
      expect(run).toMatchObject({ code: 0, stderr: '' });
      expect((JSON.parse(run.stdout) as EligibilityCheck[]).map((c) => [c.patient.lastName, c.patient.firstName])).toEqual([['O’BRIEN', 'JOSÉ']]);
      await writeFile(file, windows(''));
      expect(await cli(['convert', 'hl7', file])).toEqual({
        code: 1,
        stdout: '',
        stderr: `dental-elig: ${file}: MSH-18: text is not valid UTF-8 and MSH-18 names no other character set\n`,
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says when a file holds no message, and when it does not exist', async () => {
    expect((await cli(['convert', 'hl7', '-'], {}, '\r\n')).stderr).toBe('dental-elig: stdin: no HL7 message found\n');
    expect((await cli(['convert', 'hl7', '/nonexistent/file.hl7'])).stderr).toBe('dental-elig: /nonexistent/file.hl7: no such file\n');
  });

  describe('--as request', () => {
    let dir: string;
    let catalog: string;
    beforeAll(async () => {
      dir = await mkdtemp(path.join(tmpdir(), 'convert-hl7-'));
      catalog = path.join(dir, 'catalog.json');
      const snapshot: CatalogSnapshot = {
        syncedAt: '2024-05-01T00:00:00Z',
        payers: [
          {
            primaryPayerId: 'CIGN01',
            commonPayerId: '62308',
            name: 'Cigna',
            features: { insuranceVerificationSynchronous: { supported: true, portals: ['cigna'] } },
          },
        ],
        portals: [{ portalId: 'cigna' }],
      };
      await writeFile(catalog, JSON.stringify(snapshot));
    });
    afterAll(() => rm(dir, { recursive: true, force: true }));

    it('fails with one line naming the payer problem when no portal is known', async () => {
      expect(await convert('carepoint-adt-a04-then-siu-s12', '--as', 'request')).toEqual({
        code: 1,
        stdout: '',
        stderr: 'dental-elig: CP-1002: IN1-3/IN1-4: primary payer not resolved to a portal; pass --catalog or --portal\n',
      });
      const unknown = await convert('molarpms-siu-s12-two-insurances', '--as', 'request', '--catalog', catalog);
      expect(unknown.stderr).toBe('dental-elig: MP-0001: IN1-3/IN1-4: primary payer not in the catalog; pass --portal\n');
    });

    it('takes the portal from the catalog and sends the check key as externalId', async () => {
      const checks = JSON.parse((await convert('carepoint-adt-a04-then-siu-s12', '--catalog', catalog)).stdout) as EligibilityCheck[];
      expect(checks[0]?.coverage.resolution).toMatchObject({ status: 'resolved', primaryPayerId: 'CIGN01', syncPortals: ['cigna'] });
      const run = await convert('carepoint-adt-a04-then-siu-s12', '--as', 'request', '--catalog', catalog);
      expect(run.code).toBe(0);
      const [request] = JSON.parse(run.stdout) as unknown[];
      expect(VerificationRequest.parse(request)).toMatchObject({
        clinicId: 'cln_sandbox_north',
        portalId: 'cigna',
        payer: { payerId: '62308', name: 'Cigna' },
        subscriber: { memberId: 'U12345678', relationship: 'Self' },
        dateOfService: '2024-06-10',
        externalId: checks[0]?.idempotencyKey,
      });
    });

    it('takes --portal for payers the catalog does not settle', async () => {
      const run = await convert('molarpms-siu-s12-two-insurances', '--as', 'request', '--portal', 'deltadentalins');
      const requests = (JSON.parse(run.stdout) as unknown[]).map((r) => VerificationRequest.parse(r));
      expect(requests.map((r) => [r.portalId, r.payer.payerId, r.subscriber.relationship])).toEqual([
        ['deltadentalins', 'CDCA1', 'Self'],
        ['deltadentalins', '65978', 'Spouse'],
      ]);
    });

    it('names a catalog it cannot read, and a shape it does not know', async () => {
      const missing = await convert('carepoint-adt-a04-then-siu-s12', '--catalog', path.join(dir, 'none.json'));
      expect(missing).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: payer catalog none.json: cannot be read (ENOENT); `dental-elig setup payers sync` writes one\n' });
      expect(await convert('carepoint-adt-a04-then-siu-s12', '--as', 'fhir')).toMatchObject({ code: 2, stderr: 'dental-elig: --as: must be check or request\n' });
    });
  });
});
