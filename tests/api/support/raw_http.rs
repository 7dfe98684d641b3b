//! HTTP/1.1 spoken on a raw TCP connection, for the tests about connections themselves
//! (their cap, idle ones, slow senders), where a client library would hide what is sent
//! and when.

use super::wait::PATIENCE;

/// One HTTP/1.1 exchange on a raw connection that stays open: `GET path`, then the response
/// read whole (see [`response`]).
pub(crate) async fn exchange(stream: &mut tokio::net::TcpStream, path: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let request = format!("GET {path} HTTP/1.1\r\nHost: seckill\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    response(stream).await
}

/// The next response on a raw connection, read whole (its head and `Content-Length` bytes
/// of body), within [`PATIENCE`].
pub(crate) async fn response(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let read_whole = async {
        let mut response = Vec::new();
        let mut chunk = [0_u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.expect("read");
            assert!(read > 0, "closed before the response ended");
            response.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&response);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        line.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|n| n.trim().parse().expect("a length"))
                    })
                    .expect("Content-Length");
                if body.len() >= length {
                    return text.into_owned();
                }
            }
        }
    };
    tokio::time::timeout(PATIENCE, read_whole)
        .await
        .unwrap_or_else(|_| panic!("no answer within {PATIENCE:?}"))
}
