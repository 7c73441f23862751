'use strict'
// kafkajs through a partition reduction, driven by tests/integration/test_partition_reduction_clients.py.
// argv[2] is a JSON object: {mode: "produce" | "consume", bootstrap, topic, group?, idempotent?}.
// Writes one JSON object per line on stdout; stops cleanly when "stop" arrives on stdin.
const { Kafka, logLevel, Partitioners } = require('kafkajs')
const readline = require('readline')

const opts = JSON.parse(process.argv[2])
const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')
let stopping = false
readline.createInterface({ input: process.stdin }).on('line', line => {
  if (line.trim() === 'stop') stopping = true
})
process.stdin.on('end', () => { stopping = true })
const pause = ms => new Promise(resolve => setTimeout(resolve, ms))

const kafka = new Kafka({ clientId: 'reduction-' + opts.mode, brokers: [opts.bootstrap], logLevel: logLevel.NOTHING })

// One send() per iteration with a keyed and an unkeyed record, as an application writing
// small batches would. kafkajs runs its partitioner again on every attempt of a send(), so a
// wrapper around the default partitioner tells which partition each record went to and how
// many attempts the send took.
async function produce () {
  let chosen = []
  const partitioner = () => {
    const defaultPartitioner = Partitioners.DefaultPartitioner()
    return args => {
      const partition = defaultPartitioner(args)
      chosen.push(partition)
      return partition
    }
  }
  const producer = kafka.producer({
    createPartitioner: partitioner,
    idempotent: !!opts.idempotent,
    maxInFlightRequests: opts.idempotent ? 1 : undefined
  })
  await producer.connect()
  emit({ ready: true })
  for (let i = 0; !stopping; i++) {
    const messages = [{ key: 'key-' + (i % 10), value: 'k-' + i }, { value: 'u-' + i }]
    chosen = []
    const sentAt = Date.now()
    try {
      const answers = await producer.send({ topic: opts.topic, acks: -1, messages })
      const attempts = chosen.length / messages.length
      const last = chosen.slice(-messages.length)
      // A partition's records follow its base offset in the order they were given.
      const next = {}
      for (const answer of answers) next[answer.partition] = BigInt(answer.baseOffset)
      messages.forEach((m, k) => emit({
        value: m.value, keyed: !!m.key, partition: last[k], offset: Number(next[last[k]]++),
        attempts, sentAt, doneAt: Date.now()
      }))
    } catch (e) {
      const attempts = chosen.length / messages.length
      messages.forEach((m, k) => emit({
        value: m.value, keyed: !!m.key, partition: chosen[k], attempts, sentAt, doneAt: Date.now(),
        error: { name: e.name, type: e.type, retriable: e.retriable, message: e.message }
      }))
    }
    await pause(20)
  }
  await producer.disconnect()
}

async function consume () {
  const consumer = kafka.consumer({ groupId: opts.group, heartbeatInterval: 500 })
  consumer.on(consumer.events.GROUP_JOIN, e => emit({ assigned: e.payload.memberAssignment[opts.topic] || [] }))
  consumer.on(consumer.events.CRASH, e => emit({ crash: String(e.payload.error), restart: e.payload.restart }))
  await consumer.connect()
  await consumer.subscribe({ topic: opts.topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => emit({
      partition, offset: Number(message.offset), value: message.value.toString()
    })
  })
  while (!stopping) await pause(50)
  await consumer.disconnect()
}

(opts.mode === 'produce' ? produce() : consume()).then(
  () => { emit({ done: true }); process.exit(0) },
  e => { emit({ fatal: String(e && e.stack) }); process.exit(1) })
