'use strict'
// kafkajs reading partition 0 of a topic from the beginning, for tests/cluster/test_chunks.py.
// argv[2] is a JSON object: {bootstrap, topic, expected, timeoutMs}. Prints one JSON line:
// {records: [[offset, value], ...]} with what it read before `expected` records or the timeout.
const { Kafka, logLevel } = require('kafkajs')

const opts = JSON.parse(process.argv[2])
const kafka = new Kafka({ clientId: 'chunk-reader', brokers: [opts.bootstrap], logLevel: opts.debug ? logLevel.DEBUG : logLevel.NOTHING })

async function main () {
  const consumer = kafka.consumer({ groupId: 'chunk-reader-' + Date.now(), maxWaitTimeInMs: 500 })
  const records = []
  await consumer.connect()
  await consumer.subscribe({ topic: opts.topic, fromBeginning: true })
  let done
  const finished = new Promise(resolve => { done = resolve })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      records.push([Number(message.offset), message.value.toString()])
      if (records.length >= opts.expected) done()
    }
  })
  await Promise.race([finished, new Promise(resolve => setTimeout(resolve, opts.timeoutMs))])
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ records }) + '\n')
}

main().catch(error => {
  process.stdout.write(JSON.stringify({ error: String(error) }) + '\n')
  process.exit(1)
})
