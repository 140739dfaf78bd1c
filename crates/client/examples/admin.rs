//! Creates a topic (if missing) and prints its description and the cluster's.
//!
//! `cargo run -p syncline-client --example admin -- 127.0.0.1:9092 events`

use syncline_client::{Admin, ClientConfig, ErrorCode, NewTopic};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "events".into());
    let admin = Admin::new(ClientConfig::new(&bootstrap))?;

    let created = admin
        .create_topic(NewTopic::new(&topic, 3, 3).with_config("min.insync.replicas", "2"))
        .await;
    match created {
        Ok(t) => println!("created {} ({} partitions)", t.name, t.num_partitions),
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => println!("{topic} exists"),
        Err(e) => return Err(e.into()),
    }

    let cluster = admin.describe_cluster().await?;
    println!("controller: {:?}", cluster.controller_id);
    for b in &cluster.brokers {
        println!(
            "broker {} at {} fenced={}",
            b.endpoint.id,
            b.endpoint.address(),
            b.fenced
        );
    }
    for p in admin.describe_topic(&topic).await?.partitions {
        let hw = p.leader_view.as_ref().map(|v| v.high_watermark);
        println!(
            "{topic}-{}: leader {:?} isr {:?} hw {hw:?}",
            p.partition, p.leader, p.isr
        );
    }
    Ok(())
}
