//! Sends numbered records and reports where they landed and on which replicas.
//!
//! `cargo run -p syncline-client --example produce -- 127.0.0.1:9092 events 1000`

use syncline_client::{Acks, Producer, ProducerConfig, ProducerRecord};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "events".into());
    let count: usize = args.next().map_or(Ok(1000), |n| n.parse())?;

    let producer = Producer::new(ProducerConfig {
        acks: Acks::All,
        max_in_flight_requests_per_connection: 1, // keep order across retries
        ..ProducerConfig::new(&bootstrap)
    })?;
    // Enqueue in order, then collect the acknowledgements.
    let mut acks = Vec::with_capacity(count);
    for i in 0..count {
        let record =
            ProducerRecord::new(&topic, format!("record {i}")).with_key(format!("key-{}", i % 10));
        acks.push(producer.enqueue(record).await?);
    }
    let mut weakened = 0;
    for ack in acks {
        let md = ack.await?;
        if md.is_under_replicated() {
            weakened += 1;
        }
    }
    producer.close().await;
    println!(
        "{count} records acknowledged, {weakened} by fewer replicas than the replication factor"
    );
    Ok(())
}
