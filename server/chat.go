package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/errkind"
)

// routeChat registers the chat API (docs/chat.md, "API").
func (s *Server) routeChat(authed *gin.RouterGroup) {
	authed.POST("/conversations", h(s.createConversation))
	authed.GET("/conversations", h(s.listConversations))
	authed.POST("/conversations/:id/members", h(s.addMember))
	authed.DELETE("/conversations/:id/members/:user_id", h(s.removeMember))
	authed.POST("/conversations/:id/messages", h(s.postMessage))
	authed.GET("/conversations/:id/messages", h(s.listMessages))
	authed.POST("/conversations/:id/messages/:seq/recall", h(s.recallMessage))
}

func actor(c *gin.Context) chat.Actor {
	u := caller(c)
	return chat.Actor{ID: u.ID, Admin: u.Admin}
}

type conversationJSON struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	JoinGseq  int64     `json:"join_gseq"`
	Member    bool      `json:"member"`
}

func toConversationJSON(v chat.Conversation) conversationJSON {
	return conversationJSON{ID: v.ID, Title: v.Title, CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt, JoinGseq: v.JoinGseq, Member: v.Member}
}

func (s *Server) createConversation(c *gin.Context) error {
	var req struct {
		Title string `json:"title"`
	}
	if err := bindStrict(c, &req, chat.ErrInvalidTitle); err != nil {
		return err
	}
	v, err := s.d.Chat.CreateConversation(c.Request.Context(), actor(c), req.Title)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusCreated, toConversationJSON(v))
	return nil
}

func (s *Server) listConversations(c *gin.Context) error {
	cursor, limit, err := pageQuery(c)
	if err != nil {
		return err
	}
	list, next, err := s.d.Chat.Conversations(c.Request.Context(), actor(c), cursor, limit)
	if err != nil {
		return err
	}
	out := make([]conversationJSON, len(list))
	for i, v := range list {
		out[i] = toConversationJSON(v)
	}
	c.PureJSON(http.StatusOK, pageBody("conversations", out, next))
	return nil
}

func (s *Server) addMember(c *gin.Context) error {
	var req struct {
		UserID string `json:"user_id"`
	}
	if err := bindStrict(c, &req, nil); err != nil {
		return err
	}
	if req.UserID == "" {
		return errkind.Invalidf("missing_user_id", "user_id is required")
	}
	g, err := s.d.Chat.AddMember(c.Request.Context(), actor(c), c.Param("id"), req.UserID)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusCreated, gin.H{"join_gseq": g})
	return nil
}

func (s *Server) removeMember(c *gin.Context) error {
	g, err := s.d.Chat.RemoveMember(c.Request.Context(), actor(c), c.Param("id"), c.Param("user_id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{"leave_gseq": g})
	return nil
}

type messageJSON struct {
	Seq         int64     `json:"seq"`
	Gseq        int64     `json:"gseq"`
	Sender      string    `json:"sender"`
	Body        string    `json:"body"`
	Attachments []string  `json:"attachments"`
	Recalled    bool      `json:"recalled"`
	SentAt      time.Time `json:"sent_at"`
	// AttachmentURLs are download links for the attachments, signed for
	// the reader; the proxy checks on every request that the reader can
	// still see the message.
	AttachmentURLs map[string]string `json:"attachment_urls,omitempty"`
	// AttachmentURLsExpire is when those links stop working.
	AttachmentURLsExpire *time.Time `json:"attachment_urls_expire_at,omitempty"`
}

func (s *Server) postMessage(c *gin.Context) error {
	var req struct {
		Body        string   `json:"body"`
		Attachments []string `json:"attachments"`
	}
	if err := bindStrict(c, &req, chat.ErrInvalidBody); err != nil {
		return err
	}
	m, err := s.d.Chat.Post(c.Request.Context(), actor(c), c.Param("id"), req.Body, req.Attachments)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusCreated, gin.H{"seq": m.Seq, "gseq": m.Gseq})
	return nil
}

func (s *Server) listMessages(c *gin.Context) error {
	after, err := queryWhole(c, "after", 0)
	if err != nil {
		return err
	}
	limit, err := queryWhole(c, "limit", 0)
	if err != nil {
		return err
	}
	list, err := s.d.Chat.Messages(c.Request.Context(), actor(c), c.Param("id"), after, int(limit))
	if err != nil {
		return err
	}
	out := make([]messageJSON, len(list))
	for i, m := range list {
		out[i] = messageJSON{Seq: m.Seq, Gseq: m.Gseq, Sender: m.Sender, Body: m.Body, Attachments: m.Attachments, Recalled: m.Recalled, SentAt: m.SentAt}
		if out[i].Attachments == nil {
			out[i].Attachments = []string{}
		}
		if s.d.Links != nil && len(m.Attachments) > 0 {
			out[i].AttachmentURLs = map[string]string{}
			for _, id := range m.Attachments {
				l := s.d.Links.Link(id, caller(c).ID)
				out[i].AttachmentURLs[id], out[i].AttachmentURLsExpire = l.URL, &l.ExpiresAt
			}
		}
	}
	resp := gin.H{"messages": out}
	if len(list) > 0 {
		resp["next_after"] = list[len(list)-1].Seq
	}
	c.PureJSON(http.StatusOK, resp)
	return nil
}

func (s *Server) recallMessage(c *gin.Context) error {
	seq, err := positive(c.Param("seq"), "seq")
	if err != nil {
		return err
	}
	g, err := s.d.Chat.Recall(c.Request.Context(), actor(c), c.Param("id"), seq)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{"recall_gseq": g})
	return nil
}
