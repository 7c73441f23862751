'use strict'
// kafkajs over a secured listener, driven by tests/integration/test_security.py.
// argv[2] is a JSON object: {bootstrap, topic, group, count, caFile?, sasl?: {mechanism,
// username, password}}. Produces `count` records, reads them back in a group and prints one
// JSON object: {produced: [offsets], consumed: [[offset, value]]} or {error: message}.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const opts = JSON.parse(process.argv[2])
const kafka = new Kafka({
  clientId: 'secure-round-trip',
  brokers: [opts.bootstrap],
  logLevel: logLevel.NOTHING,
  ssl: opts.caFile ? { ca: [fs.readFileSync(opts.caFile, 'utf-8')] } : false,
  sasl: opts.sasl,
  retry: { retries: opts.retries === undefined ? 5 : opts.retries }
})

async function main () {
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < opts.count; i++) messages.push({ value: 'js-' + i })
  const sent = await producer.send({ topic: opts.topic, messages })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: opts.group })
  await consumer.connect()
  await consumer.subscribe({ topic: opts.topic, fromBeginning: true })
  const consumed = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out consuming')), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        consumed.push([Number(message.offset), message.value.toString()])
        if (consumed.length >= opts.count) { clearTimeout(timer); resolve() }
      }
    })
  })
  await consumer.disconnect()
  return { produced: sent.map(r => Number(r.baseOffset)), consumed }
}

main().then(result => {
  process.stdout.write(JSON.stringify(result) + '\n')
  process.exit(0)
}, error => {
  process.stdout.write(JSON.stringify({ error: String(error && error.message) }) + '\n')
  process.exit(0)
})
