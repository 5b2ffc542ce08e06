import { segment } from '../adapters/hl7/segment';

const PAYERS = [
  ['64246', 'Guardian'],
  ['62308', 'Cigna Dental'],
  ['CDCA1', 'Delta Dental of California'],
  ['65978', 'MetLife'],
] as const;

/** An SIU^S12 for patient `i` of a run, a sandbox member that completes: one check, one response. */
export function booking(run: string, i: number): string {
  const [payerId, payerName] = PAYERS[i % PAYERS.length] as readonly [string, string];
  return [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|${run}-${i}|P|2.5.1`,
    `SCH|APT-${run}-${i}^SC||||||||||^^^202612150900`,
    `PID|1||${run}-P${i}^^^SC^MR||PATIENT${i}^TEST||19800102|F`,
    segment('IN1', { 1: '1', 3: payerId, 4: payerName, 17: 'SEL', 36: `SBX-COMPLETE-${run}-${i}` }),
  ].join('\r');
}

/** An SIU^S12 booking of one patient with Cigna Dental (asynchronous at the sandbox) and the given member id: a sandbox scenario. */
export function bookingFor(id: string, memberId: string): string {
  return [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|${id}|P|2.5.1`,
    `SCH|APT-${id}^SC||||||||||^^^20261210093000`,
    `PID|1||P-${id}^^^SC^MR||DOE^JANE||19800102|F`,
    segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna Dental', 17: 'SEL', 36: memberId }),
  ].join('\r');
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
