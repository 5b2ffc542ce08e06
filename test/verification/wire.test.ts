import { CredentialsRecord } from '../../src/verification/wire';

describe('stored credentials as the service sends them back', () => {
  it('keeps no password: one sent back says a password is stored, an empty one that none is, a null nothing', () => {
    const record = (password: unknown) => CredentialsRecord.parse({ username: 'office1', password });
    expect([record('hunter2'), record(''), record(null), CredentialsRecord.parse({ username: 'office1' })]).toEqual([
      { username: 'office1', passwordSet: true },
      { username: 'office1', passwordSet: false },
      { username: 'office1' },
      { username: 'office1' },
    ]);
    // The service's own word wins.
    expect(CredentialsRecord.parse({ username: 'office1', password: null, passwordSet: true })).toEqual({ username: 'office1', passwordSet: true });
  });
});
