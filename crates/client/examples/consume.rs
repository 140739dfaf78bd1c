//! Reads every partition of a topic from the beginning until 2 s pass without a
//! record.
//!
//! `cargo run -p syncline-client --example consume -- 127.0.0.1:9092 events`

use std::time::Duration;

use syncline_client::{Consumer, ConsumerConfig, TopicPartition};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "events".into());

    let mut consumer = Consumer::new(ConsumerConfig::new(&bootstrap))?;
    let partitions: Vec<TopicPartition> = consumer
        .partitions_for(&topic)
        .await?
        .into_iter()
        .map(|p| TopicPartition::new(&topic, p))
        .collect();
    consumer.assign(partitions.clone());
    consumer.seek_to_beginning(&partitions)?;
    loop {
        let records = consumer.poll(Duration::from_secs(2)).await?;
        if records.is_empty() {
            break;
        }
        for r in records {
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            println!(
                "{}-{}@{}: {}",
                r.topic,
                r.partition,
                r.offset,
                value.unwrap_or_default()
            );
        }
    }
    Ok(())
}
