// Health probe for Cassandra without a driver: speaks CQL native protocol v4 over TCP, sends
// STARTUP and `SELECT release_version FROM system.local`, prints the version. Exit 1 if unhealthy.
// Usage: node cql-probe.mjs [host] [port] [query consistency]: with a query (and a consistency by
// its protocol number, 5 for ALL), prints `ok` when the server answers it with a result.
import net from 'node:net';

const [host = '127.0.0.1', port = '9042', asked, consistency = '1'] = process.argv.slice(2);
const frame = (stream, opcode, body) => {
  const head = Buffer.alloc(9);
  head.writeUInt8(0x04, 0);
  head.writeInt16BE(stream, 2);
  head.writeUInt8(opcode, 4);
  head.writeInt32BE(body.length, 5);
  return Buffer.concat([head, body]);
};
const string = (s) => { const b = Buffer.from(s); const l = Buffer.alloc(2); l.writeUInt16BE(b.length); return Buffer.concat([l, b]); };
const longString = (s) => { const b = Buffer.from(s); const l = Buffer.alloc(4); l.writeInt32BE(b.length); return Buffer.concat([l, b]); };

const startup = frame(1, 0x01, Buffer.concat([Buffer.from([0, 1]), string('CQL_VERSION'), string('3.0.0')]));
const level = Buffer.alloc(2);
level.writeUInt16BE(Number(consistency));
const query = frame(2, 0x07, Buffer.concat([longString(asked ?? 'SELECT release_version FROM system.local'), level, Buffer.from([0])]));

const socket = net.connect({ host, port: Number(port) });
const fail = (why) => { console.error(`cql-probe: ${why}`); process.exit(1); };
socket.setTimeout(3000, () => fail('timeout'));
socket.on('error', (e) => fail(e.message));
let buffer = Buffer.alloc(0);
socket.on('connect', () => socket.write(startup));
socket.on('data', (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  while (buffer.length >= 9 && buffer.length >= 9 + buffer.readInt32BE(5)) {
    const opcode = buffer.readUInt8(4);
    const body = buffer.subarray(9, 9 + buffer.readInt32BE(5));
    buffer = buffer.subarray(9 + body.length);
    if (opcode === 0x00) fail(`server error: ${body.subarray(6).toString()}`);
    if (opcode === 0x02) socket.write(query);
    if (opcode === 0x08 && asked) {
      console.log('ok');
      socket.end();
      process.exit(0);
    }
    if (opcode === 0x08) {
      // RESULT/Rows: kind, flags, column count, global table spec, one column spec, row count, cell.
      let o = 4;
      const flags = body.readInt32BE(o); o += 4;
      const columns = body.readInt32BE(o); o += 4;
      const skipString = () => { o += 2 + body.readUInt16BE(o); };
      if (flags & 1) { skipString(); skipString(); }
      for (let i = 0; i < columns; i++) { skipString(); o += 2; }
      const rows = body.readInt32BE(o); o += 4;
      if (rows < 1) fail('no rows');
      const len = body.readInt32BE(o); o += 4;
      console.log(body.subarray(o, o + len).toString());
      socket.end();
      process.exit(0);
    }
  }
});
